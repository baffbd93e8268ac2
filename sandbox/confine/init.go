package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSpec bounds the spec the init reads: the command line's own limit, with room for the rest.
const maxSpec = 4 << 20

// Init is the confined command's init, pid 1 of its new pid namespace: it builds the sandbox's
// root, starts the command in a user namespace of its own as uid 1000, reaps whatever the
// command leaves, and reports its exit on the status descriptor. When Init returns, the whole
// pid namespace dies with it, so nothing the command started outlives it.
func Init(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "tether-runner: the sandbox init is started by the runner only")
		return 125
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		fmt.Fprintln(os.Stderr, "tether-runner: malformed sandbox init descriptor")
		return 125
	}
	specFile := os.NewFile(uintptr(fd), "spec")
	var spec initSpec
	err = json.NewDecoder(io.LimitReader(specFile, maxSpec)).Decode(&spec)
	specFile.Close()
	if err != nil || spec.StatusFD < 3 || len(spec.Argv) == 0 {
		fmt.Fprintln(os.Stderr, "tether-runner: malformed sandbox init spec")
		return 125
	}
	// Never unlocked: the thread carries no_new_privs, and the command is forked from it.
	runtime.LockOSThread()
	// Not the command's to inherit: it could forge its own report.
	syscall.CloseOnExec(spec.StatusFD)
	status := os.NewFile(uintptr(spec.StatusFD), "status")
	report := func(st initStatus) int {
		raw, _ := json.Marshal(st)
		_, _ = status.Write(raw)
		status.Close()
		return 0
	}
	// The runner signals the init's whole process group, which reaches a command without a
	// terminal directly. Handled here (an init ignores what it does not handle, but the Go
	// runtime would exit on SIGTERM), these end nothing early; the command's exec resets them to
	// default. A TTY command has a session of its own: the init passes them on to it.
	var relay ttyRelay
	sigs := make(chan os.Signal, 8)
	if spec.TTY {
		signal.Notify(sigs, append(forwardedTTYSignals, syscall.SIGWINCH)...)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	}
	go func() {
		for sig := range sigs {
			if spec.TTY {
				relay.onSignal(sig)
			}
		}
	}()

	cmd, err := prepare(spec)
	var notFound *exec.Error
	if errors.As(err, &notFound) {
		return report(initStatus{Code: -1, Error: fmt.Sprintf("start %q: %v", spec.Argv[0], notFound.Err)})
	}
	if err != nil {
		return report(initStatus{Code: -1, Error: "sandbox: " + err.Error()})
	}
	if spec.TTY {
		slave, err := relay.openTerminal(cmd, spec)
		if err != nil {
			return report(initStatus{Code: -1, Error: "sandbox: " + err.Error()})
		}
		st, err := relay.run(cmd, slave)
		if err != nil {
			return report(initStatus{Code: -1, Error: fmt.Sprintf("start %q: %v", spec.Argv[0], err)})
		}
		return report(st)
	}
	if err := cmd.Start(); err != nil {
		return report(initStatus{Code: -1, Error: fmt.Sprintf("start %q: %v", spec.Argv[0], err)})
	}
	return report(reap(cmd.Process.Pid))
}

// prepare builds the root and the command to start in it.
func prepare(spec initSpec) (*exec.Cmd, error) {
	if err := buildRoot(spec); err != nil {
		return nil, err
	}
	if err := unix.Sethostname([]byte("tether")); err != nil {
		return nil, fmt.Errorf("sethostname: %w", err)
	}
	// No new privileges for anything the command runs: no setuid binary, no file capability.
	// The flag is a thread's: Init holds its thread, which is the one that forks the command.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("no_new_privs: %w", err)
	}
	dir := filepath.Join(WorkspaceDir, filepath.FromSlash(spec.WorkDir))
	if err := os.Chdir(dir); err != nil {
		return nil, fmt.Errorf("chdir %s: %w", dir, err)
	}
	name := spec.Argv[0]
	if filepath.Base(name) == name {
		p, err := exec.LookPath(name)
		if err != nil {
			return nil, err
		}
		name = p
	}
	cmd := &exec.Cmd{Path: name, Args: spec.Argv, Env: os.Environ(), Dir: dir,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	// The command's own user namespace: it is uid 1000 there with no capabilities, and the mount
	// namespace belongs to the init's, so it can change no mount of the view it was given.
	attr := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: agentID, HostID: spec.HostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: agentID, HostID: spec.HostGID, Size: 1}},
		Credential:  &syscall.Credential{Uid: agentID, Gid: agentID, NoSetGroups: true},
	}
	if os.Geteuid() == 0 && spec.HostUID != 0 {
		// A root init in the host's user namespace: the command must not keep root's groups.
		attr.GidMappingsEnableSetgroups = true
		attr.Credential.NoSetGroups = false
		attr.Credential.Groups = []uint32{}
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// reap waits for the command, reaping every orphan the namespace hands the init meanwhile.
func reap(pid int) initStatus {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return initStatus{Code: -1, Error: fmt.Sprintf("wait: %v", err)}
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return initStatus{Code: -1, Signal: int(ws.Signal())}
		}
		return initStatus{Code: ws.ExitStatus()}
	}
}
