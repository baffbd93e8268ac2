package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/project"
	"github.com/tetherhq/tether/protocol"
)

// outputTail bounds the output kept of a provision or teardown command.
const outputTail = 64 << 10

// planCheckout settles a project workspace request (project.Projects.Plan); the branch's open
// workspace, when the plan reuses it, is reopened first if closed.
func (s *Server) planCheckout(ctx context.Context, req api.CreateWorkspaceRequest) (project.Plan, error) {
	plan, err := s.projects.Plan(ctx, req)
	if err != nil || plan.Reuse == nil {
		return plan, err
	}
	reused, err := s.reuseWorkspace(ctx, *plan.Reuse)
	if err != nil {
		return project.Plan{}, err
	}
	plan.Reuse = &reused
	return plan, nil
}

// reuseWorkspace hands out a shared branch's existing workspace, reopening it when closed
// (starting it when stopped); when
// another request is reopening it at the same time, both get the workspace it reopened.
func (s *Server) reuseWorkspace(ctx context.Context, ws api.Workspace) (api.Workspace, error) {
	if ws.State == api.StateClosed || ws.State == api.StateReclaiming {
		if _, err := s.ReopenWorkspace(ctx, ws.ID, api.ReopenRequest{}); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			return ws, err
		}
	}
	if ws.State == api.StateStopped {
		if _, err := s.StartWorkspace(ctx, ws.ID); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			return ws, err
		}
	}
	return s.workspace(ctx, ws.ID)
}

// prepareCheckout fills a new allocation with its checkout (project.Projects.Checkout) and runs
// the provision commands, all through the runner inside the allocation.
func (s *Server) prepareCheckout(ctx context.Context, ws api.Workspace, proj api.Project) error {
	c, ok := s.runnerOf(ctx, ws.AllocationID)
	if !ok {
		return protocol.Errorf(protocol.CodeUnavailable, "the runner of workspace %s disconnected", ws.ID)
	}
	if err := s.projects.Checkout(ctx, c, ws, proj); err != nil {
		return err
	}
	return s.runCommands(ctx, c, ws, "provision", append(append([]string{}, proj.Provision...), ws.Git.Provision...))
}

// runCommands runs each command with `sh -c` in the workspace root through the runner, in order,
// each recorded as a run of kind with its output tail. The first failure stops the rest and is
// returned with the tail.
func (s *Server) runCommands(ctx context.Context, c *hub.Conn, ws api.Workspace, kind string, cmds []string) error {
	for _, cmd := range cmds {
		run, err := s.runScript(ctx, c, ws, kind, cmd)
		if err != nil {
			return fmt.Errorf("%s command %q: %w", kind, cmd, err)
		}
		if run.State != api.RunExited || run.ExitCode == nil || *run.ExitCode != 0 {
			how := run.State
			if run.ExitCode != nil {
				how = fmt.Sprintf("exited with %d", *run.ExitCode)
			}
			return protocol.Errorf(protocol.CodeFailed, "%s command %q %s (run %s); its output ends:\n%s", kind, cmd, how, run.ID, lastLines(run.Output, 4<<10))
		}
	}
	return nil
}

// runScript runs one shell command through the runner and records it.
func (s *Server) runScript(ctx context.Context, c *hub.Conn, ws api.Workspace, kind, script string) (api.Run, error) {
	args := protocol.ExecArgs{RunID: newID("run_"), Argv: []string{"sh", "-c", script}}
	run := api.Run{ID: args.RunID, WorkspaceID: ws.ID, AllocationID: ws.AllocationID, Argv: args.Argv,
		State: api.RunRunning, Epoch: ws.Epoch, StartedAt: s.now(), Kind: kind}
	if err := s.store.CreateRun(ctx, run); err != nil {
		return run, err
	}
	out := &tailBuffer{max: outputTail}
	exit, err := s.execCollect(ctx, c, ws.Epoch, args, out)
	if err != nil {
		exit = protocol.ExecExit{ExitCode: -1, Error: protocol.AsError(err)}
	}
	bg := context.WithoutCancel(ctx)
	if ferr := s.finishRun(bg, run.ID, exit); ferr != nil {
		return run, ferr
	}
	run.Output = out.String()
	if oerr := s.store.SetRunOutput(bg, run.ID, kind, run.Output); oerr != nil {
		return run, oerr
	}
	return s.store.GetRun(bg, run.ID)
}

// execCollect runs args on the runner and copies stdout and stderr, interleaved, into out.
func (s *Server) execCollect(ctx context.Context, c *hub.Conn, epoch uint64, args protocol.ExecArgs, out io.Writer) (protocol.ExecExit, error) {
	st, err := c.Open(protocol.OpExec, args.RunID, epoch, args)
	if err != nil {
		return protocol.ExecExit{}, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	buf := make([]byte, 256<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			return protocol.ExecExit{}, protocol.Errorf(protocol.CodeUnavailable, "lost the runner while running %q: %v", args.Argv, err)
		}
		switch ch {
		case protocol.ChanStdout, protocol.ChanStderr:
			_, _ = out.Write(p)
		case protocol.ChanExit:
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				return exit, protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)
			}
			return exit, nil
		}
	}
}

// lastLines is the end of s, at most n bytes, cut at a line start.
func lastLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// teardown runs the workspace's teardown commands before its allocation is released. A failing
// teardown is recorded (its run and an event) but does not hold the release: the work is saved
// by then, and a sandbox kept for a broken cleanup script would leak.
func (s *Server) teardown(ctx context.Context, ws api.Workspace) {
	if ws.Git == nil {
		return
	}
	proj, err := s.store.GetProject(ctx, ws.Git.ProjectID)
	if err != nil {
		return
	}
	cmds := append(append([]string{}, proj.Teardown...), ws.Git.Teardown...)
	if len(cmds) == 0 {
		return
	}
	c, ok := s.runnerOf(ctx, ws.AllocationID)
	if !ok {
		return
	}
	if err := s.runCommands(ctx, c, ws, "teardown", cmds); err != nil {
		s.log.Warn("teardown failed", "workspace", ws.ID, "err", err)
		_ = s.store.RecordEvent(ctx, ws.ID, "teardown failed: "+firstLine(protocol.AsError(err).Message))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
