package confine

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// HideRunner makes the calling process non-dumpable: no core file, and /proc/PID/{mem,environ,
// maps,fd} are root's, so not even a process of the same uid may read them or ptrace it.
func HideRunner() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// ActAsAgentOnFiles makes every file access of the whole process (all threads, and those the Go
// runtime starts later, which copy one of them) checked as uid:gid with no supplementary groups,
// while the real and effective ids stay root's: the runner keeps the right to start commands as
// the agent and to signal them, but its own file operations never reach further than the
// agent's could on the same inode (a hard link to a file the agent cannot write stays
// untouched). The filesystem capabilities (DAC override, fowner, chown) leave the effective set
// with the switch. It needs a root process built without cgo.
func ActAsAgentOnFiles(uid, gid int) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	// setfsuid reports the previous id, not an error: check that the new one took by asking again.
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSGID, uintptr(gid), 0, 0); e != 0 {
		return fmt.Errorf("setfsgid: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0); e != 0 {
		return fmt.Errorf("setfsuid: %w", e)
	}
	// An id of -1 changes nothing and reports the current one.
	if got, _ := unix.SetfsuidRetUid(-1); got != uid {
		return fmt.Errorf("setfsuid(%d) did not take: file uid is %d", uid, got)
	}
	if got, _ := unix.SetfsgidRetGid(-1); got != gid {
		return fmt.Errorf("setfsgid(%d) did not take: file gid is %d", gid, got)
	}
	return nil
}
