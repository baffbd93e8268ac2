package daytona_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/plugins/daytona"
	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/plugins/provider"
)

// These tests drive the provider through the behaviours of the real
// service the fake reproduces (issue 22's mismatches).

// The token reaches the runner but never a command's text, which Daytona
// logs; the file that carried it is gone once the runner started.
func TestTokenNeverInCommands(t *testing.T) {
	e := setup(t, nil)
	a := e.create(t, "t1", "secret-bootstrap-token")
	waitEnv(t, a.Root, "secret-bootstrap-token")
	cmds := e.f.Commands()
	if len(cmds) == 0 {
		t.Fatal("the fake recorded no command")
	}
	for _, c := range cmds {
		if strings.Contains(c, "secret-bootstrap-token") {
			t.Errorf("command text holds the token: %q", c)
		}
	}
	ents, err := os.ReadDir(filepath.Join(filepath.Dir(a.Root), ".tether"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), "boot-") || strings.Contains(ent.Name(), ".upload-") {
			t.Errorf("left in .tether: %s", ent.Name())
		}
	}
	if fi, err := os.Stat(filepath.Join(filepath.Dir(a.Root), ".tether")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf(".tether is %v, %v; want 0700", fi.Mode(), err)
	}
}

// Daytona refuses resources with a snapshot; the provider refuses them
// before it asks, and takes them with an image.
func TestResourcesNeedAnImage(t *testing.T) {
	e := setup(t, map[string]string{"snapshot": "my-snapshot"})
	req := e.request("r1", "tok")
	req.Resources = provider.Resources{CPUs: 2}
	_, err := e.p.Create(ctx(t), req)
	if provider.ErrorCode(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "image") {
		t.Fatalf("Create with a snapshot and resources = %v; want invalid_argument naming image", err)
	}
	if len(e.f.Calls()) != 0 {
		t.Errorf("calls: %v", e.f.Calls())
	}
	// The fake answers as Daytona does when asked anyway.
	body := `{"name":"x","snapshot":"my-snapshot","cpu":2,"labels":{}}`
	r, _ := http.NewRequest(http.MethodPost, e.f.URL()+"/sandbox", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+os.Getenv(keyEnv))
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg.String(), "Cannot specify Sandbox resources when using a snapshot") {
		t.Errorf("the fake answered %d %s", resp.StatusCode, msg.String())
	}
}

// A 4xx create that made its sandbox anyway (Daytona writes it first) is
// cleaned up by name, through the 409s DELETE answers while it is pending,
// and the list lags behind.
func TestCleanupAfterFailedCreate(t *testing.T) {
	e := setup(t, nil)
	e.f.Steps(5, 5)
	e.f.ListLag(10)
	e.f.FailCreatesAfterMaking(1, http.StatusBadRequest)
	_, err := e.p.Create(ctx(t), e.request("c1", "tok"))
	if provider.ErrorCode(err) != provider.CodeFailedPrecondition {
		t.Fatalf("Create = %v; want the 400 as failed_precondition", err)
	}
	if sbs := e.f.Sandboxes(); len(sbs) != 0 {
		t.Fatalf("left behind: %+v", sbs)
	}
	deletes := 0
	for _, c := range e.f.Calls() {
		if strings.HasPrefix(c, "DELETE /sandbox/") {
			deletes++
		}
	}
	if deletes < 2 {
		t.Errorf("%d deletes: the pending sandbox's 409 was not met and retried (%v)", deletes, e.f.Calls())
	}
}

// List follows nextCursor across pages.
func TestListFollowsCursor(t *testing.T) {
	f := newFake(t)
	for i := range 450 {
		f.Plant("many-"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+"-"+randName(i), map[string]string{"set": "many"})
	}
	f.Plant("other", map[string]string{"set": "other"})
	got, err := daytona.NewClient(f.URL(), os.Getenv(keyEnv)).List(ctx(t), map[string]string{"set": "many"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sb := range got {
		seen[sb.ID] = true
	}
	if len(got) != 450 || len(seen) != 450 {
		t.Fatalf("listed %d (%d distinct); want 450", len(got), len(seen))
	}
}

func randName(i int) string { return strings.Repeat("n", i/26) + string(rune('a'+i%26)) }

// 429s are retried after their Retry-After-* wait, a bounded number of
// times; past that the call fails unavailable.
func TestRateLimitRetried(t *testing.T) {
	e := setup(t, nil)
	e.create(t, "l1", "tok")
	e.f.RateLimit(2, 1)
	if _, err := e.p.Inspect(ctx(t), "l1"); err != nil {
		t.Fatalf("Inspect through two 429s: %v", err)
	}
	if n := e.f.Throttled(); n != 2 {
		t.Errorf("throttled %d times; want 2", n)
	}
	e.f.RateLimit(100, 0)
	_, err := e.p.Inspect(ctx(t), "l1")
	if provider.ErrorCode(err) != provider.CodeUnavailable {
		t.Fatalf("Inspect through endless 429s = %v; want unavailable", err)
	}
	if n := e.f.Throttled(); n > 2+10 {
		t.Errorf("retried %d times", n-2)
	}
	e.f.RateLimit(0, 0)
}

// Stop, archive, start: the archived sandbox restores (through restoring)
// and the runner starts again with the new token; Stop of an archived
// sandbox is accepted as retained.
func TestArchiveAndRestore(t *testing.T) {
	e := setup(t, nil)
	e.f.Steps(2, 6)
	a := e.create(t, "ar", "tok-1")
	waitEnv(t, a.Root, "tok-1")
	if err := e.p.Stop(ctx(t), "ar"); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Archive(ctx(t), "ar"); err != nil {
		t.Fatal(err)
	}
	wantState(t, e.p, "ar", provider.StateArchived)
	if err := e.p.Stop(ctx(t), "ar"); err != nil {
		t.Fatalf("Stop of an archived sandbox: %v", err)
	}
	if err := e.p.Start(ctx(t), provider.StartRequest{AllocationID: "ar", RunnerToken: "tok-2"}); err != nil {
		t.Fatal(err)
	}
	waitEnv(t, a.Root, "tok-2")
	wantState(t, e.p, "ar", provider.StateRunning)
}

// InstallRunner replaces the runner by rename; a failed upload leaves the
// installed runner whole and no temp file.
func TestInstallRunnerAtomic(t *testing.T) {
	e := setup(t, nil)
	a := e.create(t, "ir", "tok")
	installed := filepath.Join(filepath.Dir(a.Root), ".tether", "tether-runner")
	before, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(t.TempDir(), "tether-runner")
	if err := os.WriteFile(next, []byte(runnerScript+"# v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.f.FailUploadAfter(10)
	if err := e.p.InstallRunner(ctx(t), "ir", next); err == nil {
		t.Fatal("InstallRunner succeeded with a failing upload")
	}
	if now, _ := os.ReadFile(installed); !bytes.Equal(now, before) {
		t.Fatalf("a failed install changed the runner: %q", now)
	}
	ents, _ := os.ReadDir(filepath.Dir(installed))
	for _, ent := range ents {
		if strings.Contains(ent.Name(), ".upload-") {
			t.Errorf("temp left: %s", ent.Name())
		}
	}
	e.f.FailUploadAfter(-1)
	if err := e.p.InstallRunner(ctx(t), "ir", next); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(installed); !strings.HasSuffix(string(now), "# v2\n") {
		t.Fatalf("the runner was not replaced: %q", now)
	}
}

// Daytona's own stop SIGKILLs the runner: without the provider ending its
// session first, no SIGTERM reaches it (what makes the graceful path
// needed, checked against the fake directly).
func TestFakeStopKills(t *testing.T) {
	e := setup(t, nil)
	a := e.create(t, "k1", "tok")
	waitEnv(t, a.Root, "tok")
	id := e.sandbox(t, "k1").ID
	if err := daytona.NewClient(e.f.URL(), os.Getenv(keyEnv)).Stop(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.Root, ".term-seen")); !os.IsNotExist(err) {
		t.Fatalf("the runner saw SIGTERM from a plain stop: %v", err)
	}
	if sb := e.sandbox(t, "k1"); sb.State != fake.StateStopping && sb.State != fake.StateStopped {
		t.Fatalf("state %s after stop", sb.State)
	}
}
