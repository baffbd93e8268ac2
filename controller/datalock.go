package controller

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tetherhq/tether/protocol"
	"golang.org/x/sys/unix"
)

// DataLockFile is the file in the data directory a controller holds an exclusive lock on for as
// long as it runs; it holds the controller's pid.
const DataLockFile = "controller.lock"

// pidWait bounds how long a refused controller waits for the holder to write its pid (the holder
// takes the lock first and writes the pid just after).
const pidWait = time.Second

// dataLock is a held lock on a data directory. Even with a shared PostgreSQL store and S3 blobs
// the data directory holds one controller's own state (the runner socket runners dial, the
// provider plugins' directories, the operator token), so one directory serves one controller.
type dataLock struct{ f *os.File }

// lockDataDir takes the data directory's lock without waiting. Held elsewhere, it answers
// unavailable naming the holder's pid and changes nothing.
func lockDataDir(dir string) (*dataLock, error) {
	path := filepath.Join(dir, DataLockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, protocol.Errorf(protocol.CodeUnavailable, "data directory %s is in use by %s", dir, holder(f))
		}
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	// The lock is ours: a pid left by a controller that died is overwritten.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	return &dataLock{f: f}, nil
}

// holder names the lock's holder as "pid N", reading the pid it wrote after taking the lock.
func holder(f *os.File) string {
	deadline := time.Now().Add(pidWait)
	for {
		buf := make([]byte, 32)
		n, _ := f.ReadAt(buf, 0)
		if pid, err := strconv.Atoi(string(bytes.TrimSpace(buf[:n]))); err == nil && pid > 0 {
			return "pid " + strconv.Itoa(pid)
		}
		if time.Now().After(deadline) {
			return "another process"
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Release gives the lock up; the file stays (removing it would let a third controller lock a
// new file while a second still waits on the old one).
func (l *dataLock) Release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}
