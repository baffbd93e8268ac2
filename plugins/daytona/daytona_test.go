package daytona_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/daytona"
	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/plugins/provider"
)

// runnerScript stands in for the runner in the targeted tests: it records
// its environment in the workspace root and runs until SIGTERM.
const runnerScript = `#!/bin/sh
env > "$TETHER_WORKSPACE_ROOT/.env-seen"
trap 'echo bye > "$TETHER_WORKSPACE_ROOT/.term-seen"; exit 0' TERM
while :; do sleep 0.05; done
`

type env struct {
	p      *daytona.Provider
	f      *fake.Server
	runner string
}

func setup(t *testing.T, opts map[string]string) env {
	t.Helper()
	f := newFake(t)
	runner := filepath.Join(t.TempDir(), "tether-runner")
	if err := os.WriteFile(runner, []byte(runnerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{"api_url": f.URL(), "api_key_env": keyEnv}
	for k, v := range opts {
		cfg[k] = v
	}
	p := daytona.New("test")
	if err := p.Configure(context.Background(), provider.Config{StateDir: t.TempDir(), Options: cfg}); err != nil {
		t.Fatal(err)
	}
	return env{p: p, f: f, runner: runner}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func (e env) create(t *testing.T, id, token string) provider.Allocation {
	t.Helper()
	a, err := e.p.Create(ctx(t), e.request(id, token))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = e.p.Destroy(context.Background(), id) })
	return a
}

func (e env) request(id, token string) provider.CreateRequest {
	return provider.CreateRequest{WorkspaceID: "ws-" + id, AllocationID: id, ControllerURL: "http://127.0.0.1:1",
		RunnerToken: token, RunnerBinary: e.runner}
}

// sandbox returns allocation id's sandbox at the fake.
func (e env) sandbox(t *testing.T, id string) fake.Sandbox {
	t.Helper()
	sb, ok := e.f.Get("tether-" + id)
	if !ok {
		t.Fatalf("no sandbox for %s", id)
	}
	return sb
}

// waitEnv waits for the stand-in runner to record a token.
func waitEnv(t *testing.T, root, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(root, ".env-seen"))
		if strings.Contains(string(b), provider.EnvRunnerToken+"="+token+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not start with token %s; saw:\n%s", token, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantState(t *testing.T, p provider.Provider, id string, want provider.State) {
	t.Helper()
	st, err := p.Inspect(ctx(t), id)
	if err != nil || st.State != want {
		t.Fatalf("Inspect(%s) = %+v, %v; want %s", id, st, err, want)
	}
}

// callsSince returns the fake's mutating calls after the first n.
func callsSince(f *fake.Server, n int) []string { return f.Calls()[n:] }

func hasCall(calls []string, suffix string) bool {
	return slices.ContainsFunc(calls, func(c string) bool { return strings.HasSuffix(c, suffix) })
}

func TestCreateStartStopDelete(t *testing.T) {
	e := setup(t, map[string]string{"auto_delete_interval": "60", "auto_stop_interval": "30"})
	a := e.create(t, "a1", "tok-1")
	waitEnv(t, a.Root, "tok-1")
	sb := e.sandbox(t, "a1")
	if sb.AutoDeleteInterval != 60 || sb.AutoStopInterval != 30 || sb.State != fake.StateStarted {
		t.Fatalf("sandbox after create: %+v", sb)
	}
	wantState(t, e.p, "a1", provider.StateRunning)

	ep, err := e.p.Endpoint(ctx(t), "a1", 3000)
	if err != nil || !strings.HasPrefix(ep.URL, "https://3000-") || ep.Headers[daytona.PreviewTokenHeader] == "" {
		t.Fatalf("Endpoint = %+v, %v", ep, err)
	}

	n := len(e.f.Calls())
	if err := e.p.Stop(ctx(t), "a1"); err != nil {
		t.Fatal(err)
	}
	calls := callsSince(e.f, n)
	if len(calls) != 3 || !strings.HasSuffix(calls[0], "/autodelete/-1") || !strings.Contains(calls[1], "DELETE /toolbox/"+sb.ID+"/process/session/tether-runner-") ||
		!strings.HasSuffix(calls[2], "/stop") {
		t.Fatalf("Stop made calls %v; want auto-delete disabled, the runner's session ended, then stop", calls)
	}
	// The runner had SIGTERM (the fake's stop alone SIGKILLs it).
	if b, err := os.ReadFile(filepath.Join(a.Root, ".term-seen")); err != nil || string(b) != "bye\n" {
		t.Errorf("the runner was not ended gracefully: %q, %v", b, err)
	}
	if sb := e.sandbox(t, "a1"); sb.AutoDeleteInterval != -1 || sb.State != fake.StateStopped {
		t.Fatalf("after Stop: %+v", sb)
	}
	wantState(t, e.p, "a1", provider.StateStopped)

	if err := e.p.Start(ctx(t), provider.StartRequest{AllocationID: "a1", RunnerToken: "tok-2"}); err != nil {
		t.Fatal(err)
	}
	waitEnv(t, a.Root, "tok-2")
	wantState(t, e.p, "a1", provider.StateRunning)

	dir := e.f.Dir(sb.ID)
	if err := e.p.Destroy(ctx(t), "a1"); err != nil {
		t.Fatal(err)
	}
	wantState(t, e.p, "a1", provider.StateGone)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory is still there: %v", err)
	}
}

// A sandbox that reads back archived after retention is accepted as
// stopped, without a Stop call (Daytona refuses Stop on archived ones).
func TestStopArchivedIsStopped(t *testing.T) {
	e := setup(t, nil)
	e.create(t, "a2", "tok")
	e.f.ArchiveOnNextRead(e.sandbox(t, "a2").ID)
	n := len(e.f.Calls())
	if err := e.p.Stop(ctx(t), "a2"); err != nil {
		t.Fatalf("Stop of a sandbox that reads back archived: %v", err)
	}
	calls := callsSince(e.f, n)
	if len(calls) != 1 || !strings.HasSuffix(calls[0], "/autodelete/-1") {
		t.Fatalf("Stop made calls %v; want only the auto-delete update", calls)
	}
	wantState(t, e.p, "a2", provider.StateArchived)
}

// A stopped sandbox that resumed since it was last seen is stopped again,
// and never started or deleted by the stop path.
func TestStopResumedHandle(t *testing.T) {
	e := setup(t, nil)
	e.create(t, "a3", "tok")
	if err := e.p.Stop(ctx(t), "a3"); err != nil {
		t.Fatal(err)
	}
	e.f.ResumeOnNextRead(e.sandbox(t, "a3").ID)
	n := len(e.f.Calls())
	if err := e.p.Stop(ctx(t), "a3"); err != nil {
		t.Fatal(err)
	}
	calls := callsSince(e.f, n)
	if !hasCall(calls, "/stop") || hasCall(calls, "/start") || slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "DELETE") }) {
		t.Fatalf("Stop of a resumed sandbox made calls %v; want a stop, no start, no delete", calls)
	}
	wantState(t, e.p, "a3", provider.StateStopped)
}

// When the fresh read does not show auto-delete disabled, Stop fails with
// retention_unconfirmed and leaves the sandbox as it was.
func TestStopRetentionUnconfirmed(t *testing.T) {
	e := setup(t, map[string]string{"auto_delete_interval": "60"})
	e.create(t, "a4", "tok")
	e.f.IgnoreAutoDelete(true)
	n := len(e.f.Calls())
	err := e.p.Stop(ctx(t), "a4")
	if provider.ErrorCode(err) != daytona.CodeRetentionUnconfirmed {
		t.Fatalf("Stop = %v; want %s", err, daytona.CodeRetentionUnconfirmed)
	}
	if calls := callsSince(e.f, n); hasCall(calls, "/stop") || hasCall(calls, "/start") {
		t.Fatalf("an unconfirmed Stop made calls %v", calls)
	}
	if sb := e.sandbox(t, "a4"); sb.State != fake.StateStarted || sb.AutoDeleteInterval != 60 || hasCall(callsSince(e.f, n), "/process/session/") {
		t.Fatalf("sandbox after an unconfirmed Stop: %+v", sb)
	}
	e.f.IgnoreAutoDelete(false)
	if err := e.p.Stop(ctx(t), "a4"); err != nil {
		t.Fatalf("Stop once Daytona keeps the setting: %v", err)
	}
}

// An upload that fails after the sandbox was made deletes it by its id.
func TestFailedCreateCleanupByID(t *testing.T) {
	e := setup(t, nil)
	e.f.FailUploadAfter(100)
	_, err := e.p.Create(ctx(t), e.request("a5", "tok"))
	if err == nil {
		t.Fatal("Create succeeded with a failing upload")
	}
	if sbs := e.f.Sandboxes(); len(sbs) != 0 {
		t.Fatalf("sandboxes left after a failed Create: %+v", sbs)
	}
	if !slices.ContainsFunc(e.f.Calls(), func(c string) bool {
		return strings.HasPrefix(c, "DELETE /sandbox/") && !strings.Contains(c, "tether-")
	}) {
		t.Errorf("cleanup did not delete by sandbox id: %v", e.f.Calls())
	}
	wantState(t, e.p, "a5", provider.StateGone)
}

// A create whose answer is lost is found by its exact labels and deleted;
// sandboxes with other labels are left alone.
func TestFailedCreateCleanupByLabels(t *testing.T) {
	e := setup(t, nil)
	other := e.f.Plant("tether-other", map[string]string{"tether.provider": "daytona", "tether.allocation": "other"})
	notOurs := e.f.Plant("someones-box", map[string]string{"tether.allocation": "a6"})
	e.f.LoseCreateResponses(1)
	_, err := e.p.Create(ctx(t), e.request("a6", "tok"))
	if err == nil {
		t.Fatal("Create succeeded with a lost answer")
	}
	var left []string
	for _, sb := range e.f.Sandboxes() {
		left = append(left, sb.ID)
	}
	slices.Sort(left)
	want := []string{other, notOurs}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("sandboxes left %v; want only the two others %v", left, want)
	}
	wantState(t, e.p, "a6", provider.StateGone)
}

func TestFailingCreateLeavesNothing(t *testing.T) {
	e := setup(t, nil)
	e.f.FailCreateAfter(1)
	e.create(t, "a7", "tok")
	if _, err := e.p.Create(ctx(t), e.request("a8", "tok")); err == nil {
		t.Fatal("second Create succeeded")
	}
	if len(e.f.Sandboxes()) != 1 {
		t.Fatalf("sandboxes: %+v", e.f.Sandboxes())
	}
}

// Without an API key nothing reaches Daytona.
func TestNoKeyNoTraffic(t *testing.T) {
	e := setup(t, nil)
	p := daytona.New("test")
	cfg := provider.Config{StateDir: t.TempDir(), Options: map[string]string{"api_url": e.f.URL(), "api_key_env": "TETHER_TEST_NO_SUCH_KEY"}}
	if err := p.Configure(ctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	_, err := p.Create(ctx(t), e.request("a9", "tok"))
	if provider.ErrorCode(err) != provider.CodeFailedPrecondition || !strings.Contains(err.Error(), "TETHER_TEST_NO_SUCH_KEY") {
		t.Fatalf("Create without a key = %v", err)
	}
	if len(e.f.Calls()) != 0 {
		t.Fatalf("calls without a key: %v", e.f.Calls())
	}
}
