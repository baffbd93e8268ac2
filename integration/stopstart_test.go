package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/controller/api"
	tclient "github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/protocol"
)

// stopWS runs `workspace stop --json` and returns the workspace it printed.
func (c *controllerProc) stopWS(t *testing.T, id string) api.Workspace {
	t.Helper()
	var ws api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "stop", id, "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	return ws
}

// startWS runs `workspace start --json` and returns the workspace it printed.
func (c *controllerProc) startWS(t *testing.T, id string) api.Workspace {
	t.Helper()
	var ws api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "start", id, "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	return ws
}

// stopStartJourney is the journey every provider that stops and keeps goes through: unsaved
// work and a running run at the stop, reads and writes while stopped, the work still there after
// the start under a new epoch. sandbox reports, for the provider at hand, whether the sandbox's
// processes run (false: stopped and kept).
func stopStartJourney(t *testing.T, c *controllerProc, ws api.Workspace, sandboxRuns func() bool) {
	t.Helper()
	ctx := context.Background()
	cl := c.Client(t)
	if r := c.cli(t, strings.NewReader("saved\n"), "files", "put", ws.ID, "-", "saved.txt"); r.Code != 0 {
		t.Fatalf("put saved.txt: %+v", r)
	}
	c.mustCLI(t, "snapshot", "create", ws.ID)
	if r := c.cli(t, strings.NewReader("unsaved\n"), "files", "put", ws.ID, "-", "unsaved.txt"); r.Code != 0 {
		t.Fatalf("put unsaved.txt: %+v", r)
	}
	// A run that ends on SIGTERM with a status of its own: the stop gives it the signal and its
	// grace, and the record says why it ended.
	r := c.cli(t, nil, "exec", "--detach", ws.ID, "--", "sh", "-c", "trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done")
	runID := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || runID == "" {
		t.Fatalf("exec --detach: %+v", r)
	}
	eventually(t, 30*time.Second, "the run's trap to be set", func() bool {
		return c.cli(t, nil, "run", "logs", runID).Stdout == "ready\n"
	})
	// A writer holding a lease across the stop is fenced after the start.
	var lease api.Lease
	if err := json.Unmarshal([]byte(c.mustCLI(t, "lease", "acquire", ws.ID, "--holder", "agent-1", "--json")), &lease); err != nil {
		t.Fatal(err)
	}
	before := c.showWorkspace(t, ws.ID)

	stopped := c.stopWS(t, ws.ID)
	if stopped.State != api.StateStopped || stopped.Connected || stopped.AllocationID != ws.AllocationID {
		t.Fatalf("after stop: %+v", stopped)
	}
	if sandboxRuns() {
		t.Fatal("the sandbox still runs after the stop")
	}
	run, err := cl.GetRun(ctx, runID)
	if err != nil || run.State != api.RunExited || run.ExitCode == nil || *run.ExitCode != 9 || !strings.Contains(run.Error, "workspace stopped") {
		t.Fatalf("the run active at the stop: %+v, %v", run, err)
	}
	// A stop of a stopped workspace answers it as it is.
	if again := c.stopWS(t, ws.ID); again.State != api.StateStopped {
		t.Fatalf("second stop: %+v", again)
	}
	// Reads: the sandbox keeps work no save has, so no saved copy stands in for it.
	for _, p := range []string{"unsaved.txt", "saved.txt"} {
		if r := c.cli(t, nil, "files", "get", ws.ID, p); r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: unavailable: ") || !strings.Contains(r.Stderr, "tether workspace start") {
			t.Fatalf("files get %s while stopped: %+v", p, r)
		}
	}
	// Writes and exec: typed, naming the state and the way out, and changing nothing.
	for _, args := range [][]string{
		{"exec", ws.ID, "--", "true"},
		{"files", "rm", ws.ID, "saved.txt"},
	} {
		r := c.cli(t, nil, args...)
		if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: conflict: ") || !strings.Contains(r.Stderr, "is stopped") ||
			!strings.Contains(r.Stderr, "tether workspace start "+ws.ID) {
			t.Fatalf("%v while stopped: %+v", args, r)
		}
	}
	evs, err := cl.ListEvents(ctx, ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	var moves []string
	for _, ev := range evs {
		moves = append(moves, string(ev.From)+"→"+string(ev.To))
	}
	if !slices.Contains(moves, "ready→stopping") || !slices.Contains(moves, "stopping→stopped") {
		t.Fatalf("events: %v", moves)
	}

	started := c.startWS(t, ws.ID)
	if started.State != api.StateReady || !started.Connected || started.AllocationID != ws.AllocationID || started.Epoch <= before.Epoch {
		t.Fatalf("after start: %+v (before the stop: epoch %d)", started, before.Epoch)
	}
	if !sandboxRuns() {
		t.Fatal("the sandbox does not run after the start")
	}
	for p, want := range map[string]string{"unsaved.txt": "unsaved\n", "saved.txt": "saved\n"} {
		if r := c.cli(t, nil, "exec", ws.ID, "--", "cat", p); r.Code != 0 || r.Stdout != want {
			t.Fatalf("cat %s after the start: %+v", p, r)
		}
	}
	// The lease from before the stop is gone and its epoch fenced.
	if r := c.cli(t, strings.NewReader("x"), "files", "put", "--epoch", strconv.FormatUint(lease.Epoch, 10), ws.ID, "-", "late.txt"); r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: stale_epoch: ") {
		t.Fatalf("write with the lease's epoch from before the stop: %+v", r)
	}

	// Saved, then stopped: the receipt holds exactly the kept tree, so reads serve it.
	c.mustCLI(t, "snapshot", "create", ws.ID)
	c.stopWS(t, ws.ID)
	var got bytes.Buffer
	res, err := cl.ReadFile(ctx, ws.ID, "unsaved.txt", &got, tclient.ReadOptions{})
	if err != nil || got.String() != "unsaved\n" || res.Source != protocol.SourceSaved || res.SnapshotID == "" {
		t.Fatalf("read of a stopped workspace whose tree is saved: %q, %+v, %v", got.String(), res, err)
	}
	// Close starts a stopped workspace first, then saves and releases it.
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", ws.ID, "--json")), &closed); err != nil {
		t.Fatal(err)
	}
	if closed.Workspace.State != api.StateClosed {
		t.Fatalf("close of a stopped workspace: %+v", closed)
	}
}

// Stop and start on the local provider: the runner's process and the run's are gone while
// stopped, and a new runner serves the same directory after the start.
func TestStopStartLocal(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "stopper")
	pid := c.runnerPID(t, ws)
	stopStartJourney(t, c, ws, func() bool {
		return alive(c.runnerPID(t, ws))
	})
	if alive(pid) {
		t.Fatalf("the first runner (pid %d) outlived the stop", pid)
	}
}

// Stop and start on Docker: the container is stopped (not removed) and started again, files
// kept.
func TestStopStartDocker(t *testing.T) {
	dcli := dockerEngine(t)
	c := startDockerController(t, dcli)
	ws := c.createOn(t, "docker", "--name", "dstopper")
	names := containersOf(t, dcli, ws.AllocationID)
	if len(names) != 1 {
		t.Fatalf("containers of %s: %v", ws.AllocationID, names)
	}
	stopStartJourney(t, c, ws, func() bool {
		res, err := dcli.ContainerInspect(context.Background(), names[0], client.ContainerInspectOptions{})
		if err != nil {
			t.Fatalf("inspect %s: %v", names[0], err)
		}
		return res.Container.State.Running
	})
}

// Stop and start on Daytona, against the fake: the sandbox is stopped at the provider and
// started again, the unsaved file still there.
func TestStopStartDaytonaFake(t *testing.T) {
	c, api0 := startDaytonaFakeController(t)
	var ws api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "create", "--provider", "daytona", "--name", "dstop", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, strings.NewReader("kept\n"), "files", "put", "dstop", "-", "kept.txt"); r.Code != 0 {
		t.Fatalf("put: %+v", r)
	}
	state := func() string {
		for _, sb := range api0.Sandboxes() {
			if sb.Labels["tether.allocation"] == ws.AllocationID {
				return sb.State
			}
		}
		return "none"
	}
	if st := c.stopWS(t, "dstop"); st.State != api.StateStopped {
		t.Fatalf("after stop: %+v", st)
	}
	if s := state(); s != fake.StateStopped {
		t.Fatalf("the fake's sandbox is %s after the stop", s)
	}
	started := c.startWS(t, "dstop")
	if started.State != api.StateReady || started.Epoch <= ws.Epoch || state() != fake.StateStarted {
		t.Fatalf("after start: %+v (fake: %s)", started, state())
	}
	if r := c.cli(t, nil, "exec", "dstop", "--", "cat", "kept.txt"); r.Code != 0 || r.Stdout != "kept\n" {
		t.Fatalf("cat after start: %+v", r)
	}
}
