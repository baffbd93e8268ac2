package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

type artifactRecord struct {
	ID        string `json:"id"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Untrusted bool   `json:"untrusted"`
}

func (c *controllerProc) putArtifact(t *testing.T, ws, body string) artifactRecord {
	t.Helper()
	f := filepath.Join(t.TempDir(), "artifact")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var a artifactRecord
	if err := json.Unmarshal([]byte(c.mustCLI(t, "artifact", "put", f, "--workspace", ws, "--json")), &a); err != nil {
		t.Fatal(err)
	}
	if a.ID == "" || a.Bytes != int64(len(body)) || !a.Untrusted {
		t.Fatalf("artifact record: %+v", a)
	}
	return a
}

// Driven as an agent would: the runner's own CLI inside the sandbox installs saved bytes.
func TestArtifactDownloadThroughTheRunner(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "agent")
	other := c.createWorkspace(t, "--name", "other")
	resp := `{"api":"response","items":[1,2,3]}` + "\n"
	a := c.putArtifact(t, "agent", resp)

	var got protocol.ArtifactInstall
	out := c.mustCLI(t, "exec", "agent", "--", "tether-runner", "artifact", "download", a.ID, "saved/resp.json", "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("download printed %q: %v", out, err)
	}
	if got.Path != "saved/resp.json" || got.Bytes != a.Bytes || got.SHA256 != a.SHA256 || !got.Untrusted || got.Replayed {
		t.Fatalf("install: %+v (record %+v)", got, a)
	}
	check := c.mustCLI(t, "exec", "agent", "--", "sh", "-c", "sha256sum saved/resp.json | cut -c1-64; stat -c %s saved/resp.json")
	if check != a.SHA256+"\n"+itoa(a.Bytes)+"\n" {
		t.Fatalf("installed file: %q; record %s %d", check, a.SHA256, a.Bytes)
	}
	// The identical retry changes nothing and says so.
	out = c.mustCLI(t, "exec", "agent", "--", "tether-runner", "artifact", "download", a.ID, "saved/resp.json", "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil || !got.Replayed {
		t.Fatalf("retry: %q, %v", out, err)
	}

	if err := os.WriteFile(filepath.Join(ws.Root, "taken"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(ws.Root, "link")); err != nil {
		t.Fatal(err)
	}
	giveToAgent(t, ws.Root)
	theirs := c.putArtifact(t, "other", "someone else's bytes")
	for _, tc := range []struct {
		id, dest, code string
	}{
		{a.ID, "taken", "conflict"},
		{a.ID, "link/x", "symlink_refused"},
		{a.ID, "../escape", "path_escape"},
		{theirs.ID, "theirs", "not_found"},
		{"art_missing", "missing", "not_found"},
	} {
		r := c.cli(t, nil, "exec", "agent", "--", "tether-runner", "artifact", "download", tc.id, tc.dest)
		if r.Code != protocol.Code(tc.code).ExitCode() || !strings.Contains(r.Stderr, "error: "+tc.code+": ") {
			t.Errorf("download %s → %s: want %s, got %+v", tc.id, tc.dest, tc.code, r)
		}
		if tc.id == theirs.ID && (strings.Contains(r.Stderr, theirs.SHA256) || strings.Contains(r.Stderr, "bytes") || strings.Contains(r.Stderr, "sha256")) {
			t.Errorf("a foreign artifact's refusal reveals its hash or size: %q", r.Stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws.Root, "taken")); string(b) != "mine" {
		t.Fatalf("a refused install changed the destination: %q", b)
	}
	// Another workspace's artifact and one that does not exist get one answer, byte for byte:
	// same exit status, same stdout, same stderr — the agent cannot tell which ids exist.
	for _, args := range [][]string{{"dest"}, {"dest", "--json"}} {
		download := func(id string) result {
			return c.cli(t, nil, append([]string{"exec", "agent", "--", "tether-runner", "artifact", "download", id}, args...)...)
		}
		foreign, missing := download(theirs.ID), download("art_"+strings.Repeat("5a", 8))
		if foreign.Code != missing.Code || foreign.Stdout != missing.Stdout || foreign.Stderr != missing.Stderr {
			t.Errorf("download %v: another workspace's artifact answers %+v, a missing one %+v", args, foreign, missing)
		}
		if foreign.Code != protocol.CodeNotFound.ExitCode() || !strings.HasPrefix(foreign.Stderr, "error: not_found: ") {
			t.Errorf("download %v of another workspace's artifact: %+v", args, foreign)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws.Root, "dest")); err == nil {
		t.Fatal("a refused download created its destination")
	}
	_ = other

	c.mustCLI(t, "artifact", "revoke", a.ID)
	if r := c.cli(t, nil, "exec", "agent", "--", "tether-runner", "artifact", "download", a.ID, "again.json"); !strings.Contains(r.Stderr, "error: revoked: ") {
		t.Fatalf("download of a revoked artifact: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(ws.Root, "again.json")); err == nil {
		t.Fatal("a revoked artifact was installed")
	}
	var runs []struct {
		Argv []string `json:"argv"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", "agent", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range runs {
		if len(r.Argv) > 1 && r.Argv[0] == "artifact-install" && r.Argv[1] == a.ID {
			found = true
		}
	}
	if !found {
		t.Fatalf("the install is not in the run log: %+v", runs)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A 1 GiB artifact installs with the runner's memory bounded by its stream window and buffers,
// not by the artifact's size.
func TestArtifactLargeWithBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GiB")
	}
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "big")
	src := filepath.Join(t.TempDir(), "big.bin")
	bigRandomFile(t, src, 1<<30)
	var a artifactRecord
	if err := json.Unmarshal([]byte(c.mustCLI(t, "artifact", "put", src, "--workspace", "big", "--json")), &a); err != nil {
		t.Fatal(err)
	}
	pid := c.runnerPID(t, ws)
	// Reset the runner's peak RSS (VmHWM), then read it after the install.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the runner's peak RSS here: %v", err)
	}
	c.mustCLI(t, "exec", "big", "--", "tether-runner", "artifact", "download", a.ID, "big.bin")
	out := c.mustCLI(t, "exec", "big", "--", "sh", "-c", "sha256sum big.bin | cut -c1-64; stat -c %s big.bin")
	if out != a.SHA256+"\n"+itoa(a.Bytes)+"\n" {
		t.Fatalf("installed 1 GiB artifact: %q", out)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var hwmKiB int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d", &hwmKiB)
		}
	}
	// The bound is generous (a 1 GiB body through a 2 MiB window needs a few MiB); what it
	// catches is memory that grows with the artifact.
	if hwmKiB == 0 || hwmKiB > 96<<10 {
		t.Fatalf("runner peak RSS during a 1 GiB install: %d KiB", hwmKiB)
	}
	t.Logf("runner peak RSS during the 1 GiB install: %.1f MiB", float64(hwmKiB)/1024)
}
