package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// procStat is the part of /proc/<pid>/stat we rely on.
type procStat struct {
	pid     int
	state   byte
	session int
	// start is field 22, the start time in clock ticks since boot. With the
	// pid it names one process for the life of the machine, which is what
	// lets a later plugin process act on a pid file without hitting a
	// recycled pid.
	start uint64
}

func (s procStat) zombie() bool { return s.state == 'Z' || s.state == 'X' }

// readProcStat reads /proc/<pid>/stat. A missing process yields an error
// matching os.ErrNotExist.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := parseProcStat(data)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parseProcStat parses a stat line. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from its last ')'.
func parseProcStat(data []byte) (procStat, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return procStat{}, errors.New("malformed stat line")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("pid: %w", err)
	}
	// rest[0] is field 3 (state), so field N is rest[N-3].
	rest := bytes.Fields(data[end+1:])
	if len(rest) < 22-3+1 || len(rest[0]) != 1 {
		return procStat{}, errors.New("short stat line")
	}
	session, err := strconv.Atoi(string(rest[6-3]))
	if err != nil {
		return procStat{}, fmt.Errorf("session: %w", err)
	}
	start, err := strconv.ParseUint(string(rest[22-3]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime: %w", err)
	}
	return procStat{pid: pid, state: rest[0][0], session: session, start: start}, nil
}

// sessionMembers lists live (non-zombie) processes in session sid that
// started no earlier than minStart. The start bound keeps a long-running
// unrelated process out even in the far-fetched case of a reused session id.
func sessionMembers(sid int, minStart uint64) ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var members []procStat
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // exited while we looked
		}
		if st.session == sid && st.start >= minStart && !st.zombie() {
			members = append(members, st)
		}
	}
	return members, nil
}

// signalSame signals the process p names, and only it: the pidfd pins the
// process, and re-reading its stat through /proc after opening the pidfd
// proves the pid was not recycled in between.
func signalSame(p procStat, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		return signalSameNoPidfd(p, sig)
	}
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", p.pid, err)
	}
	defer unix.Close(fd)
	if !sameProcess(p) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	return nil
}

// signalSameNoPidfd is for kernels before 5.3; the check-then-kill window is
// microseconds and would need a full pid wrap-around to matter.
func signalSameNoPidfd(p procStat, sig syscall.Signal) error {
	if !sameProcess(p) {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	return nil
}

// sameProcess reports whether p.pid still names the process p was read from
// and it has not exited.
func sameProcess(p procStat) bool {
	cur, err := readProcStat(p.pid)
	return err == nil && cur.start == p.start && !cur.zombie()
}
