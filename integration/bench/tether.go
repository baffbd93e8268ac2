package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// tetherEnv is a real controller (`tether serve`) on a temporary data dir, with the local provider.
type tetherEnv struct {
	binDir, data string
	cmd          *exec.Cmd
	logged       chan struct{} // closed when the controller's stderr ends
	addr, token  string
	cl           *client.Client

	mu         sync.Mutex
	workspaces []string // created and not yet deleted
	runnerPIDs []int    // runners seen, killed at close if they outlive their workspace
}

// startController runs `tether serve --listen 127.0.0.1:0` and learns its address from the line
// it prints once listening.
func startController(ctx context.Context, binDir string) (*tetherEnv, error) {
	data, err := os.MkdirTemp("", "tether-bench-")
	if err != nil {
		return nil, err
	}
	t := &tetherEnv{binDir: binDir, data: data, logged: make(chan struct{})}
	logFile, err := os.Create(filepath.Join(data, "controller.log"))
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	t.cmd = exec.Command(filepath.Join(binDir, "tether"), "serve", "--data", data, "--listen", "127.0.0.1:0")
	t.cmd.Env = cleanEnv()
	t.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its provider plugins join its group
	stderr, err := t.cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		os.RemoveAll(data)
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(data)
		return nil, fmt.Errorf("start controller: %w", err)
	}
	addrc := make(chan string, 1)
	go func() {
		defer close(t.logged)
		defer logFile.Close()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if rest, ok := strings.CutPrefix(line, "tether controller on "); ok {
				addr, _, _ := strings.Cut(rest, " ")
				select {
				case addrc <- addr:
				default:
				}
			}
		}
	}()
	select {
	case t.addr = <-addrc:
	case <-t.logged:
		log, _ := os.ReadFile(filepath.Join(data, "controller.log"))
		t.close()
		return nil, fmt.Errorf("controller exited before listening:\n%s", strings.TrimSpace(string(log)))
	case <-time.After(30 * time.Second):
		t.close()
		return nil, errors.New("controller did not report its address within 30s")
	case <-ctx.Done():
		t.close()
		return nil, ctx.Err()
	}
	tok, err := os.ReadFile(filepath.Join(data, "operator.token"))
	if err != nil {
		t.close()
		return nil, err
	}
	t.token = strings.TrimSpace(string(tok))
	if t.cl, err = client.New(t.addr, t.token); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// cleanEnv is the environment without TETHER_* settings the caller may have.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			env = append(env, kv)
		}
	}
	return env
}

// close deletes the workspaces still alive, stops the controller and removes the data dir.
func (t *tetherEnv) close() {
	t.mu.Lock()
	wss := t.workspaces
	t.workspaces = nil
	t.mu.Unlock()
	for _, id := range wss {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := t.cl.DeleteWorkspace(ctx, id); err != nil {
			progress("delete workspace %s: %v", id, err)
		}
		cancel()
	}
	if t.cmd.Process != nil {
		_ = t.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-t.logged:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
		}
		_ = t.cmd.Wait()
	}
	// Runners live in their own sessions; one that outlived its workspace is ours to stop.
	runner := filepath.Join(t.binDir, "tether-runner")
	for _, pid := range t.runnerPIDs {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == runner {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	os.RemoveAll(t.data)
}

// createWorkspace times client.CreateWorkspace on the local provider, which returns once the
// runner said hello.
func (t *tetherEnv) createWorkspace(ctx context.Context, name string) (api.Workspace, time.Duration, error) {
	return t.createWorkspaceOn(ctx, name, "local")
}

// createWorkspaceOn is createWorkspace on the named provider.
func (t *tetherEnv) createWorkspaceOn(ctx context.Context, name, provider string) (api.Workspace, time.Duration, error) {
	return t.createWorkspaceReq(ctx, api.CreateWorkspaceRequest{Name: name, Provider: provider})
}

// createWorkspaceReq times client.CreateWorkspace with req (Provider set), which returns once
// the workspace is ready: for a project workspace, after its checkout too.
func (t *tetherEnv) createWorkspaceReq(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, time.Duration, error) {
	provider := req.Provider
	start := time.Now()
	ws, err := t.cl.CreateWorkspace(ctx, req)
	took := time.Since(start)
	if ws.ID != "" {
		t.track(ws.ID)
	}
	if err != nil {
		return ws, 0, err
	}
	if ws.State != api.StateReady || !ws.Connected {
		return ws, 0, fmt.Errorf("workspace %s is %s (connected %v): %s", ws.ID, ws.State, ws.Connected, ws.Reason)
	}
	if provider != "local" {
		return ws, took, nil
	}
	if pid, err := t.runnerPID(ws); err == nil {
		t.mu.Lock()
		t.runnerPIDs = append(t.runnerPIDs, pid)
		t.mu.Unlock()
	}
	return ws, took, nil
}

func (t *tetherEnv) track(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.workspaces = append(t.workspaces, id)
}

func (t *tetherEnv) deleteWorkspace(ctx context.Context, id string) error {
	_, err := t.cl.DeleteWorkspace(ctx, id)
	if err == nil {
		t.mu.Lock()
		t.workspaces = removeString(t.workspaces, id)
		t.mu.Unlock()
	}
	return err
}

func removeString(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// runnerPID reads DATA/providers/local/<allocation>/runner.pid ("PID STARTTIME").
func (t *tetherEnv) runnerPID(ws api.Workspace) (int, error) {
	b, err := os.ReadFile(filepath.Join(t.data, "providers", "local", ws.AllocationID, "runner.pid"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("empty runner.pid")
	}
	return strconv.Atoi(f[0])
}

// exec runs argv in the workspace through the Go client and requires exit status 0.
func (t *tetherEnv) exec(ctx context.Context, id string, stdout io.Writer, argv ...string) error {
	return t.execIO(ctx, id, nil, stdout, argv...)
}

// execIO is exec with stdin (nil: none).
func (t *tetherEnv) execIO(ctx context.Context, id string, stdin io.Reader, stdout io.Writer, argv ...string) error {
	var stderr bytes.Buffer
	exit, err := t.cl.Exec(ctx, id, protocol.ExecArgs{Argv: argv}, stdin, stdout, &stderr)
	if err != nil {
		return err
	}
	if s := exit.Status(); s != 0 {
		return fmt.Errorf("%s: exit status %d: %s", strings.Join(argv, " "), s, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// cli runs the tether CLI against this controller.
func (t *tetherEnv) cli(ctx context.Context, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(t.binDir, "tether"), args...)
	cmd.Env = append(cleanEnv(), "TETHER_ADDR="+t.addr, "TETHER_TOKEN="+t.token)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tether %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// cliCreate times `tether workspace create`, a CLI process end to end.
func (t *tetherEnv) cliCreate(ctx context.Context, name string) (string, time.Duration, error) {
	var out bytes.Buffer
	start := time.Now()
	err := t.cli(ctx, &out, "workspace", "create", "--provider", "local", "--name", name)
	took := time.Since(start)
	id := strings.TrimSpace(out.String())
	if id != "" {
		t.track(id)
	}
	return id, took, err
}

func (t *tetherEnv) version(ctx context.Context) string {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(t.binDir, "tether-runner"), "--version")
	cmd.Stdout = &out
	if cmd.Run() != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.TrimPrefix(out.String(), "tether-runner"))
}
