package confine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// InitArg is the first argument that makes the runner binary act as a confined command's init.
const InitArg = "__tether-confine-init"

// Paths inside the namespace sandbox.
const (
	WorkspaceDir = "/workspace"
	HomeDir      = "/home/agent"
	toolDir      = "/run/tether/bin"
	socketDir    = "/run/tether/sock"
	// agentID is the uid and gid agent commands have inside their user namespace.
	agentID = 1000
)

// sandboxPath is the PATH confined commands get: the runner's tools first, then the system's.
const sandboxPath = toolDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Policy says how agent commands are confined. The zero value (Mode "") confines nothing.
type Policy struct {
	Mode string // protocol.IsolationNamespaces, IsolationUID or IsolationNone
	// UID and GID are the agent's ids: in the sandbox for IsolationUID; on the host for
	// IsolationNamespaces with a root runner (ignored otherwise: an unprivileged runner can only
	// map its own ids).
	UID, GID int
	// Namespaces only: the workspace root on the host, a provider-made directory holding the
	// agent's tmp/ and home/ and an empty mnt/ (the new root's mount point), the agent socket,
	// and the runner executable (the init, and the agent's tool at /run/tether/bin).
	Workspace   string
	StateDir    string
	AgentSocket string
	Self        string
}

// Active says whether p confines anything.
func (p Policy) Active() bool {
	return p.Mode == protocol.IsolationUID || p.Mode == protocol.IsolationNamespaces
}

// Check refuses a policy that would not confine what it says it does.
func (p Policy) Check() error {
	switch p.Mode {
	case "", protocol.IsolationNone:
		return nil
	case protocol.IsolationUID:
		if p.UID <= 0 || p.GID <= 0 {
			return fmt.Errorf("confine: isolation uid needs a non-root agent uid and gid, got %d:%d", p.UID, p.GID)
		}
		if os.Geteuid() != 0 {
			return errors.New("confine: isolation uid needs a root runner (it starts commands as the agent uid)")
		}
		return nil
	case protocol.IsolationNamespaces:
		if os.Geteuid() == 0 && (p.UID <= 0 || p.GID <= 0) {
			return fmt.Errorf("confine: a root runner needs an unprivileged host uid and gid for the agent, got %d:%d", p.UID, p.GID)
		}
		for name, v := range map[string]string{"workspace": p.Workspace, "state dir": p.StateDir, "runner binary": p.Self} {
			if !filepath.IsAbs(v) {
				return fmt.Errorf("confine: the %s must be an absolute path, got %q", name, v)
			}
		}
		return nil
	}
	return fmt.Errorf("confine: unknown isolation %q", p.Mode)
}

// Confine implements process.Confiner.
func (p Policy) Confine(cmd *exec.Cmd, workDir string) (process.Confined, error) {
	none := process.Confined{Started: func() {}, Exit: func(e process.Exit) (process.Exit, error) { return e, nil }}
	switch p.Mode {
	case protocol.IsolationUID:
		// Groups empty: the runner's own supplementary groups never reach the agent.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.UID), Gid: uint32(p.GID), Groups: []uint32{}}
		return none, nil
	case protocol.IsolationNamespaces:
		return p.confineNamespaces(cmd, workDir)
	}
	return none, nil
}

// initSpec is what the runner tells a confined command's init; it travels as one argument.
type initSpec struct {
	Argv        []string `json:"argv"`
	WorkDir     string   `json:"work_dir"` // workspace-relative, already checked by the guard
	Workspace   string   `json:"workspace"`
	StateDir    string   `json:"state_dir"`
	AgentSocket string   `json:"agent_socket,omitempty"`
	Self        string   `json:"self"`
	// HostUID and HostGID are what the agent's uid and gid 1000 map to, seen from the init's
	// user namespace: host ids for a root runner, 0 (the init's own, the runner's) otherwise.
	HostUID int `json:"host_uid"`
	HostGID int `json:"host_gid"`
	// StatusFD is the descriptor the init reports the command's exit on.
	StatusFD int `json:"status_fd"`
	// TTY says the init's stdin, stdout and stderr are a terminal (its controlling one, already
	// raw): the command runs on a terminal of the sandbox's own, relayed to it (see tty.go).
	TTY bool `json:"tty,omitempty"`
}

// initStatus is the init's report: how the command ended, or why it never ran.
type initStatus struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (p Policy) confineNamespaces(cmd *exec.Cmd, workDir string) (process.Confined, error) {
	tty := cmd.SysProcAttr.Setctty
	if tty {
		// A terminal command (process.Spec.Terminal): the init becomes its terminal's session
		// leader, so it gets SIGWINCH on a resize, and relays it to the sandbox's own terminal.
		term, ok := cmd.Stdin.(*os.File)
		if !ok {
			return process.Confined{}, errors.New("confine: a terminal command needs its terminal as stdin")
		}
		if err := makeRaw(term); err != nil {
			return process.Confined{}, err
		}
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return process.Confined{}, err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return process.Confined{}, err
	}
	specFD := 3 + len(cmd.ExtraFiles)
	spec := initSpec{
		Argv: cmd.Args, WorkDir: cleanRel(workDir), Workspace: p.Workspace, StateDir: p.StateDir,
		AgentSocket: p.AgentSocket, Self: p.Self, StatusFD: specFD + 1, TTY: tty,
	}
	attr := cmd.SysProcAttr
	attr.Cloneflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
	if os.Geteuid() == 0 {
		spec.HostUID, spec.HostGID = p.UID, p.GID
	} else {
		// An unprivileged runner needs a user namespace to mount anything; in it the init is root,
		// mapped to the runner's own ids, the only ones it may map.
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		for _, f := range []*os.File{statusR, statusW, specR, specW} {
			f.Close()
		}
		return process.Confined{}, err
	}
	// The command is looked up inside the sandbox, by the init: a name the host lacks (the
	// runner's own tool, say) is no error here. The spec goes through a pipe, not the command
	// line, which anyone on the host can read and which would show the agent the host's layout.
	cmd.Path, cmd.Args, cmd.Err = p.Self, []string{p.Self, InitArg, strconv.Itoa(specFD)}, nil
	// The init chdirs inside its new root; a directory of the runner's would be a way out.
	cmd.Dir = ""
	cmd.Env = sandboxEnv(cmd.Env, p.AgentSocket)
	cmd.ExtraFiles = append(cmd.ExtraFiles, specR, statusW)
	return process.Confined{
		Started: func() {
			specR.Close()
			statusW.Close()
			// Written after the start, so a spec longer than the pipe holds cannot block it; a
			// child that never started reads nothing and the write fails harmlessly.
			go func() {
				_, _ = specW.Write(raw)
				specW.Close()
			}()
		},
		Exit: func(e process.Exit) (process.Exit, error) {
			defer statusR.Close()
			return readStatus(statusR, e)
		},
	}, nil
}

// readStatus reads the init's report; without one the init itself died (killed with its whole
// pid namespace, say), and its own exit is the command's.
func readStatus(r *os.File, wrapper process.Exit) (process.Exit, error) {
	var st initStatus
	buf := make([]byte, 4096)
	n, _ := r.Read(buf)
	if n == 0 {
		if wrapper.Signal == 0 && wrapper.Code != 0 {
			return wrapper, fmt.Errorf("sandbox init exited with code %d before starting the command", wrapper.Code)
		}
		return wrapper, nil
	}
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		return wrapper, fmt.Errorf("sandbox init: unreadable status: %w", err)
	}
	if st.Error != "" {
		// As an unconfined command that cannot start: the command failed, typed.
		return process.Exit{Code: -1}, protocol.Errorf(protocol.CodeFailed, "%s", st.Error)
	}
	if st.Signal != 0 {
		return process.Exit{Code: -1, Signal: st.Signal}, nil
	}
	return process.Exit{Code: st.Code}, nil
}

// sandboxEnv rewrites the host-side variables a confined command would find wrong inside.
func sandboxEnv(env []string, agentSocket string) []string {
	set := map[string]string{
		"HOME": HomeDir, "TMPDIR": "/tmp", "USER": "agent", "LOGNAME": "agent", "PATH": sandboxPath,
	}
	if agentSocket != "" {
		set[protocol.EnvSocket] = path.Join(socketDir, filepath.Base(agentSocket))
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok || k == "PWD" || k == "OLDPWD" || k == protocol.EnvWorkspaceRoot {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return append(out, protocol.EnvWorkspaceRoot+"="+WorkspaceDir)
}

func cleanRel(rel string) string {
	rel = path.Clean("/" + filepath.ToSlash(rel))
	return strings.TrimPrefix(rel, "/")
}

// Probe runs the runner binary's version command confined by p, proving the kernel allows the
// confinement. The workspace must exist.
func Probe(p Policy) error {
	if p.Mode == protocol.IsolationNamespaces && p.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		p.Self = self
	}
	if err := p.Check(); err != nil {
		return err
	}
	var out strings.Builder
	proc, err := process.Start(process.Spec{
		Argv: []string{"tether-runner", "--version"}, Env: []string{"PATH=" + sandboxPath},
		Dir: p.Workspace, Stdout: &out, Stderr: &out, Confiner: p,
	})
	if err != nil {
		return err
	}
	exit, err := proc.Wait(context.Background())
	if err != nil {
		return err
	}
	if exit.Code != 0 || !strings.Contains(out.String(), "tether-runner") {
		return fmt.Errorf("confined probe ended %+v: %s", exit, strings.TrimSpace(out.String()))
	}
	return nil
}
