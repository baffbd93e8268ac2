package integration

import (
	"encoding/json"
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
	theirs := c.putArtifact(t, "other", "someone else's bytes")
	for _, tc := range []struct {
		id, dest, code string
	}{
		{a.ID, "taken", "conflict"},
		{a.ID, "link/x", "symlink_refused"},
		{a.ID, "../escape", "path_escape"},
		{theirs.ID, "theirs", "foreign_artifact"},
		{"art_missing", "missing", "not_found"},
	} {
		r := c.cli(t, nil, "exec", "agent", "--", "tether-runner", "artifact", "download", tc.id, tc.dest)
		if r.Code != protocol.Code(tc.code).ExitCode() || !strings.Contains(r.Stderr, "error: "+tc.code+": ") {
			t.Errorf("download %s → %s: want %s, got %+v", tc.id, tc.dest, tc.code, r)
		}
		if tc.code == "foreign_artifact" && (strings.Contains(r.Stderr, theirs.SHA256) || strings.Contains(r.Stderr, "bytes") || strings.Contains(r.Stderr, "sha256")) {
			t.Errorf("a foreign artifact's refusal reveals its hash or size: %q", r.Stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws.Root, "taken")); string(b) != "mine" {
		t.Fatalf("a refused install changed the destination: %q", b)
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
