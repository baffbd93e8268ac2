package integration

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// TestDaytonaLiveJourney is the opt-in end-to-end run against the real Daytona: a real runner in
// a real sandbox connects to a real controller, and the workspace goes create → runner connected
// → unsaved work → stop-and-retain (confirmed by a fresh read) → start (a new epoch, the work
// still there) → close (saved and verified) → reopen → rm. It needs, besides DAYTONA_API_KEY
// (and optionally DAYTONA_API_URL), a controller address the sandbox can dial:
// TETHER_LIVE_LISTEN (the address the test's controller listens on, e.g. 127.0.0.1:7420) and
// TETHER_LIVE_ADVERTISE_URL (the public URL that reaches it, e.g. a tunnel). Without them it
// sends nothing anywhere and skips. Archive and the export through Daytona's own file API are
// covered by plugins/daytona's TestLive.
func TestDaytonaLiveJourney(t *testing.T) {
	key, listen, advertise := os.Getenv("DAYTONA_API_KEY"), os.Getenv("TETHER_LIVE_LISTEN"), os.Getenv("TETHER_LIVE_ADVERTISE_URL")
	if key == "" || listen == "" || advertise == "" {
		t.Skip("DAYTONA_API_KEY, TETHER_LIVE_LISTEN and TETHER_LIVE_ADVERTISE_URL are not all set: skipping the live Daytona journey (it would create real sandboxes at Daytona)")
	}
	args := []string{"--advertise-url", advertise, "--ready-timeout", "10m",
		"--provider-config", "daytona.api_key_env=DAYTONA_API_KEY"}
	if u := os.Getenv("DAYTONA_API_URL"); u != "" {
		args = append(args, "--provider-config", "daytona.api_url="+u)
	}
	c := startController(t, serveOpts{listen: listen, extraArgs: args})
	ws := c.createOn(t, "daytona", "--name", "live-journey")
	t.Cleanup(func() { c.cli(t, nil, "workspace", "rm", ws.ID, "--purge") })
	if r := c.cli(t, strings.NewReader("unsaved\n"), "files", "put", ws.ID, "-", "work.txt"); r.Code != 0 {
		t.Fatalf("put: %+v", r)
	}
	stopped := c.stopWS(t, ws.ID)
	if stopped.State != api.StateStopped {
		t.Fatalf("stop: %+v", stopped)
	}
	started := c.startWS(t, ws.ID)
	if started.State != api.StateReady || started.Epoch <= ws.Epoch || started.AllocationID != ws.AllocationID {
		t.Fatalf("start: %+v (before the stop: %+v)", started, ws)
	}
	if r := c.cli(t, nil, "exec", ws.ID, "--", "cat", "work.txt"); r.Code != 0 || r.Stdout != "unsaved\n" {
		t.Fatalf("the unsaved work after stop and start: %+v", r)
	}
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", ws.ID, "--json")), &closed); err != nil {
		t.Fatal(err)
	}
	if closed.Workspace.State != api.StateClosed {
		t.Fatalf("close: %+v", closed)
	}
	c.mustCLI(t, "workspace", "reopen", ws.ID)
	if r := c.cli(t, nil, "exec", ws.ID, "--", "cat", "work.txt"); r.Code != 0 || r.Stdout != "unsaved\n" {
		t.Fatalf("after close and reopen: %+v", r)
	}
}
