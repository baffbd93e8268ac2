package daytona_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/daytona"
	"github.com/tetherhq/tether/plugins/provider"
)

// TestLive drives a real Daytona sandbox through its lifecycle: create →
// runner started (it records its connection environment) → stop-and-retain
// → archive → start (restoring) → export → destroy. It is opt-in: without
// DAYTONA_API_KEY it sends nothing anywhere and skips. DAYTONA_API_URL and
// DAYTONA_TARGET override the defaults. The runner is a shell script that
// writes a marker into the workspace and waits, since a Daytona sandbox
// cannot reach a test controller on this host's loopback; the export then
// proves it ran and that the files survived stop, archive and restore.
func TestLive(t *testing.T) {
	if os.Getenv("DAYTONA_API_KEY") == "" {
		t.Skip("DAYTONA_API_KEY is not set: skipping the live Daytona suite (it would create real sandboxes at Daytona)")
	}
	opts := map[string]string{}
	if u := os.Getenv("DAYTONA_API_URL"); u != "" {
		opts["api_url"] = u
	}
	if tg := os.Getenv("DAYTONA_TARGET"); tg != "" {
		opts["target"] = tg
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	p := daytona.New("live-test")
	if err := p.Configure(c, provider.Config{StateDir: t.TempDir(), Options: opts}); err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(t.TempDir(), "tether-runner")
	script := "#!/bin/sh\n[ -n \"$TETHER_RUNNER_TOKEN\" ] && echo \"$TETHER_ALLOCATION_ID\" > \"$TETHER_WORKSPACE_ROOT/live-marker\"\nexec sleep 3600\n"
	if err := os.WriteFile(runner, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	id := "live-" + time.Now().UTC().Format("20060102-150405")
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.Destroy(c, id); err != nil {
			t.Errorf("Destroy %s: %v (delete sandbox tether-%s by hand)", id, err, id)
		}
	})
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	alloc, err := p.Create(c, provider.CreateRequest{WorkspaceID: "ws-" + id, AllocationID: id,
		ControllerURL: "http://127.0.0.1:1", RunnerToken: "live-token", RunnerBinary: runner})
	step("Create", err)
	t.Logf("created %+v", alloc)
	wantState(t, p, id, provider.StateRunning)
	ep, err := p.Endpoint(c, id, 8080)
	step("Endpoint", err)
	t.Logf("endpoint %s (token header set: %v)", ep.URL, ep.Headers[daytona.PreviewTokenHeader] != "")
	step("Stop", p.Stop(c, id))
	wantState(t, p, id, provider.StateStopped)
	step("Stop again", p.Stop(c, id))
	step("Start", p.Start(c, provider.StartRequest{AllocationID: id, RunnerToken: "live-token-2"}))
	wantState(t, p, id, provider.StateRunning)
	step("Stop", p.Stop(c, id))
	step("Archive", p.Archive(c, id))
	step("Stop of an archived sandbox", p.Stop(c, id))
	step("Start from archived", p.Start(c, provider.StartRequest{AllocationID: id, RunnerToken: "live-token-3"}))
	wantState(t, p, id, provider.StateRunning)
	dest := t.TempDir()
	res, err := p.ExportFiles(c, provider.ExportRequest{AllocationID: id, Dest: dest, MaxBytes: 1 << 20})
	step("Export", err)
	if b, err := os.ReadFile(filepath.Join(dest, "live-marker")); err != nil || string(b) != id+"\n" {
		t.Errorf("exported marker %q, %v (export %+v)", b, err, res)
	}
	step("Destroy", p.Destroy(c, id))
	wantState(t, p, id, provider.StateGone)
}
