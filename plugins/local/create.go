package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// passEnv are the only host variables the runner inherits: enough for a
// usable shell, without the controller's credentials.
var passEnv = []string{"HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// defaultPath is used when the host has no PATH at all.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// Create makes the allocation directory, its marker and workspace root, and
// starts the runner there as a host process in its own session.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Allocation, error) {
	dir, err := p.allocationDir(req.AllocationID)
	if err != nil {
		return provider.Allocation{}, err
	}
	if err := validateCreate(req); err != nil {
		return provider.Allocation{}, err
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return provider.Allocation{}, err
	}
	// Re-vet the state dir: it may have been swapped or loosened since
	// Configure, and everything below trusts it.
	if err := lstatPrivate(filepath.Dir(dir)); err != nil {
		return provider.Allocation{}, err
	}
	if err := mkdirPrivate(dir); err != nil {
		return provider.Allocation{}, err
	}
	m := marker{Allocation: req.AllocationID, Workspace: req.WorkspaceID, ControllerURL: req.ControllerURL,
		Runner: req.RunnerBinary, Env: req.Env, Labels: req.Labels, Created: time.Now().UTC(),
		Isolation: options.Resolve(p.configOptions(), req.Options)["isolation"], AgentID: -1}
	if m.Isolation == isolationNamespaces {
		m.AgentID = agentHostID(req.AllocationID)
	}
	alloc, err := createIn(ctx, dir, m, req, p.probes.check)
	if err != nil {
		// Nothing was handed out yet; leave no half-made allocation behind.
		_ = removeTree(dir)
		return provider.Allocation{}, err
	}
	return alloc, nil
}

func createIn(ctx context.Context, dir string, m marker, req provider.CreateRequest, probe func(ctx context.Context, dir, runner string, agentID int) error) (provider.Allocation, error) {
	if err := writeMarker(dir, m); err != nil {
		return provider.Allocation{}, provider.Errorf(provider.CodeProviderFailed, "%v", err)
	}
	if err := mkdirPrivate(filepath.Join(dir, rootDirName)); err != nil {
		return provider.Allocation{}, err
	}
	if m.Isolation == isolationNamespaces {
		if err := prepareSandbox(dir, m.AgentID); err != nil {
			return provider.Allocation{}, err
		}
		if err := provider.CheckRunnerBinary(m.Runner); err != nil {
			return provider.Allocation{}, err
		}
		if err := probe(ctx, dir, m.Runner, m.AgentID); err != nil {
			return provider.Allocation{}, err
		}
	}
	return startRunner(dir, m, req.RunnerToken)
}

// startRunner starts the allocation's runner binary in its root and records
// its pid and start time.
func startRunner(dir string, m marker, token string) (provider.Allocation, error) {
	root := filepath.Join(dir, rootDirName)
	// The root is the agent's once isolated: its host uid owns it (and may have changed its mode).
	if m.AgentID >= 0 {
		if err := lstatOwnedDir(root, m.AgentID); err != nil {
			return provider.Allocation{}, err
		}
	} else if err := lstatPrivate(root); err != nil {
		return provider.Allocation{}, err
	}
	runner := m.Runner
	if err := provider.CheckRunnerBinary(runner); err != nil {
		return provider.Allocation{}, err
	}
	logPath := filepath.Join(dir, logFileName)
	logFile, err := openNoFollow(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return provider.Allocation{}, provider.Errorf(provider.CodeProviderFailed, "open runner log: %v", err)
	}
	// The child gets its own copy of the descriptor; ours can go.
	defer logFile.Close()

	cmd := &exec.Cmd{
		Path:   runner,
		Args:   []string{runner},
		Dir:    root,
		Env:    runnerEnv(dir, m, token, root, runner, os.Getenv),
		Stdin:  nil, // /dev/null
		Stdout: logFile,
		Stderr: logFile,
		// A new session makes the runner a process-group leader
		// (pgid == pid) like Setpgid would, detaches it from the
		// controller's terminal, and keeps every process it starts
		// findable by session id even when they get their own groups,
		// so Stop can sweep them if the runner dies first.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return provider.Allocation{}, provider.Errorf(provider.CodeProviderFailed, "start runner: %v", err)
	}
	pid := cmd.Process.Pid
	// Not yet waited for, so even if the runner already exited its /proc
	// entry is still there as a zombie and the start time is readable.
	st, err := readProcStat(pid)
	if err == nil {
		err = writePidFile(filepath.Join(dir, pidFileName), pid, st.start)
	}
	if err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return provider.Allocation{}, provider.Errorf(provider.CodeProviderFailed, "record runner pid: %v", err)
	}
	// Reap the runner so it never lingers as a zombie. Its exit status is
	// of no use here: the controller sees the websocket drop.
	go func() { _ = cmd.Wait() }()

	info := isolationInfo(m)
	info["pid"], info["log"] = strconv.Itoa(pid), logPath
	return provider.Allocation{ID: m.Allocation, Root: root, Info: info}, nil
}

func validateCreate(req provider.CreateRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	if err := options.Check(req.Options); err != nil {
		return err
	}
	return nil
}

// runnerEnv builds the runner's whole environment. The runner binary's
// directory goes first on PATH so commands can call tether-runner (the
// agent tools do) without knowing where the controller keeps it.
func runnerEnv(dir string, m marker, token, root, runner string, getenv func(string) string) []string {
	env := make(map[string]string, len(passEnv)+len(m.Env)+6)
	for _, k := range passEnv {
		if v := getenv(k); v != "" {
			env[k] = v
		}
	}
	path := getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env["PATH"] = filepath.Dir(runner) + string(os.PathListSeparator) + path
	for k, v := range m.Env {
		env[k] = v
	}
	for k, v := range isolationEnv(dir, m) {
		env[k] = v
	}
	env[provider.EnvControllerURL] = m.ControllerURL
	env[provider.EnvRunnerToken] = token
	env[provider.EnvAllocationID] = m.Allocation
	env[provider.EnvWorkspaceID] = m.Workspace
	env[provider.EnvWorkspaceRoot] = root

	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// writePidFile records "<pid> <starttime>\n" atomically, so a reader sees
// either nothing or the whole record.
func writePidFile(path string, pid int, start uint64) error {
	tmp := path + ".tmp"
	f, err := openNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %d\n", pid, start)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readPidFile parses what writePidFile wrote. A missing file is reported as
// fs.ErrNotExist: the allocation never got a runner.
func readPidFile(path string) (pid int, start uint64, err error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var buf [64]byte
	n, err := f.Read(buf[:])
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("%s: malformed pid file", path)
	}
	pid, err = strconv.Atoi(fields[0])
	if err == nil && pid <= 1 {
		err = errors.New("pid out of range")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: pid: %w", path, err)
	}
	start, err = strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: start time: %w", path, err)
	}
	return pid, start, nil
}
