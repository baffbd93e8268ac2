package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"github.com/tetherhq/tether/protocol"
)

// TestClusterDurableRunsThroughPeers: a detached run's logs, attach, signal and wait answer the
// same through every controller of a cluster, whichever of them holds the runner: the others
// reach it through their tunnel. An idempotency key repeated on another controller is the same
// run.
func TestClusterDurableRunsThroughPeers(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ws, err := c.ClientOf(t, 0).CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "runs", Provider: "local"})
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	// The run prints 200 numbered lines, then waits for a TERM; its exit says it got one.
	script := `i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); done; echo err >&2; ` +
		`trap 'echo termed; exit 42' TERM; while :; do sleep 0.05; done`
	args := protocol.ExecArgs{Argv: []string{"sh", "-c", script}, Detach: true, IdempotencyKey: "peers-1"}
	res, err := c.ClientOf(t, 1).ExecRun(ctx, ws.ID, args, client.ExecIO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err != nil || res.RunID == "" || !res.Detached {
		t.Fatalf("detached exec through controller 1: %+v, %v", res, err)
	}
	// The same key through controller 2 is the same run: never a second process.
	again, err := c.ClientOf(t, 2).ExecRun(ctx, ws.ID, args, client.ExecIO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err != nil || again.RunID != res.RunID {
		t.Fatalf("repeat of the key through controller 2: run %q (%v); want %s", again.RunID, err, res.RunID)
	}
	var want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	// Until the 200 lines are written, a read may see fewer: wait for them through controller 0.
	waitLines(ctx, t, c.ClientOf(t, 0), res.RunID, want.String())
	for i := range c.Controllers {
		var out, errb bytes.Buffer
		end, err := c.ClientOf(t, i).RunLogs(ctx, res.RunID, client.RunLogsOptions{}, &out, &errb)
		if err != nil {
			t.Fatalf("run logs through controller %d: %v", i, err)
		}
		if out.String() != want.String() || errb.String() != "err\n" || end.Finished {
			t.Fatalf("run logs through controller %d: %d stdout bytes, stderr %q, end %+v; want the 200 lines, \"err\\n\", running",
				i, out.Len(), errb.String(), end)
		}
		// From an offset, through each controller: exactly the rest.
		off := int64(len("line 0\nline 1\n"))
		out.Reset()
		if _, err := c.ClientOf(t, i).RunLogs(ctx, res.RunID, client.RunLogsOptions{StdoutOffset: off, Stream: protocol.StreamStdout}, &out, &errb); err != nil {
			t.Fatalf("run logs from offset %d through controller %d: %v", off, i, err)
		}
		if out.String() != want.String()[off:] {
			t.Fatalf("run logs from offset %d through controller %d: %d bytes, want %d", off, i, out.Len(), len(want.String())-int(off))
		}
	}
	// A waiter on controller 2 and an attached reader on controller 0 both see the end that a
	// signal sent through controller 1 causes.
	waited := make(chan error, 1)
	go func() {
		run, err := c.ClientOf(t, 2).WaitRun(ctx, res.RunID)
		if err == nil && (run.State != api.RunExited || run.ExitCode == nil || *run.ExitCode != 42) {
			err = fmt.Errorf("run %+v; want exited 42", run)
		}
		waited <- err
	}()
	attached := make(chan error, 1)
	var att bytes.Buffer
	go func() {
		r, err := c.ClientOf(t, 0).AttachRun(ctx, res.RunID, int64(len(want.String())), int64(len("err\n")), client.ExecIO{Stdout: &att, Stderr: &bytes.Buffer{}})
		if err == nil && r.Exit.Status() != 42 {
			err = fmt.Errorf("attach ended with %+v; want status 42", r.Exit)
		}
		attached <- err
	}()
	if _, err := c.ClientOf(t, 1).SignalRun(ctx, res.RunID, "TERM"); err != nil {
		t.Fatalf("signal TERM through controller 1: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("run wait through controller 2: %v", err)
	}
	if err := <-attached; err != nil {
		t.Fatalf("run attach through controller 0: %v", err)
	}
	if att.String() != "termed\n" {
		t.Fatalf("attach from the end printed %q; want %q", att.String(), "termed\n")
	}
}

// waitLines reads the run's stdout until it is want (or ctx ends).
func waitLines(ctx context.Context, t *testing.T, cl *client.Client, runID, want string) {
	t.Helper()
	for {
		var out bytes.Buffer
		if _, err := cl.RunLogs(ctx, runID, client.RunLogsOptions{Stream: protocol.StreamStdout}, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("run logs: %v", err)
		}
		if out.String() == want {
			return
		}
		if !strings.HasPrefix(want, out.String()) {
			t.Fatalf("run logs printed %q, not a prefix of the 200 lines", out.String())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the run's 200 lines did not arrive: %d bytes", out.Len())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
