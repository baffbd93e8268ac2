package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

const (
	defaultStopGrace = 5 * time.Second
	// killWait bounds the wait for SIGKILLed processes to disappear.
	killWait  = 5 * time.Second
	pollEvery = 50 * time.Millisecond
)

// Stop terminates the runner's process group, then SIGKILLs whatever is
// left of its session, and keeps the allocation's directory for Start. It
// acts only on the process recorded in runner.pid, identified by pid and
// start time, so a new plugin process (after a controller restart) can stop
// runners an earlier one started without ever hitting a recycled pid.
// Stopping a stopped allocation is not an error; an unknown one is
// CodeNotFound.
func (p *Provider) Stop(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	dir, _, err := p.owned(allocationID)
	if err != nil {
		return err
	}
	return stopAllocation(ctx, dir, p.stopGrace)
}

// Destroy stops the allocation and removes its directory, workspace
// included. An unknown allocation is not an error; a directory the provider
// did not make is refused and left alone.
func (p *Provider) Destroy(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	dir, _, err := p.owned(allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if err := stopAllocation(ctx, dir, p.stopGrace); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "destroy %s: %v", allocationID, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", dir)
	}
	if err := removeTree(dir); err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "remove %s: %v", dir, err)
	}
	return nil
}

func stopAllocation(ctx context.Context, dir string, grace time.Duration) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "stop: %v", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", dir)
	}
	pid, start, err := readPidFile(filepath.Join(dir, pidFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // Create failed before the runner started
	}
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "stop: %v", err)
	}
	return stopSession(ctx, pid, start, grace)
}

// stopSession stops the runner (pid, start) and every process left in its
// session. The runner was started with Setsid, so its pid is also its
// process group and session id.
func stopSession(ctx context.Context, pid int, start uint64, grace time.Duration) error {
	leader, err := readProcStat(pid)
	switch {
	case err == nil && leader.start != start:
		// The pid now names another process. The kernel does not reuse a
		// pid while a session or group with that id has members, so the
		// runner's session is already empty.
		return nil
	case err == nil && !leader.zombie():
		// The runner is alive; SIGTERM its group and let it stop the
		// commands it started.
		if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return provider.Errorf(provider.CodeProviderFailed, "signal runner %d: %v", pid, err)
		}
	default:
		// The runner is gone; orphans of its session get the SIGTERM.
		if err := signalSession(pid, start, syscall.SIGTERM); err != nil {
			return err
		}
	}

	done, err := waitSessionGone(ctx, pid, start, grace)
	if err != nil {
		// The caller stopped waiting, not wanting the runner kept: skip
		// the rest of the grace period rather than leave it running.
		_ = signalSession(pid, start, syscall.SIGKILL)
		return err
	}
	if done {
		return nil
	}
	// Keep killing until the session is empty: a member may fork between
	// our scan and its SIGKILL.
	deadline := time.Now().Add(killWait)
	for time.Now().Before(deadline) {
		if err := signalSession(pid, start, syscall.SIGKILL); err != nil {
			return err
		}
		if done, err := waitSessionGone(ctx, pid, start, 10*pollEvery); done || err != nil {
			return err
		}
	}
	return provider.Errorf(provider.CodeProviderFailed, "runner %d: processes still alive after SIGKILL", pid)
}

// signalSession signals every live process of session sid started no
// earlier than the runner.
func signalSession(sid int, start uint64, sig syscall.Signal) error {
	members, err := sessionMembers(sid, start)
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "list processes: %v", err)
	}
	for _, m := range members {
		if err := signalSame(m, sig); err != nil {
			return provider.Errorf(provider.CodeProviderFailed, "%v", err)
		}
	}
	return nil
}

// waitSessionGone polls until the session has no live members, the timeout
// passes (done=false), or ctx ends.
func waitSessionGone(ctx context.Context, sid int, start uint64, timeout time.Duration) (done bool, err error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		members, err := sessionMembers(sid, start)
		if err != nil {
			return false, provider.Errorf(provider.CodeProviderFailed, "list processes: %v", err)
		}
		if len(members) == 0 {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timer.C:
			return false, nil
		case <-tick.C:
		}
	}
}
