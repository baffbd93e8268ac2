package stableread

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// userfaultfd's ioctls (linux/userfaultfd.h): _IOWR(0xAA, nr, size of the argument).
const (
	uffdAPI             = 0xAA
	uffdioAPI           = 0xC018AA3F // struct uffdio_api, 24 bytes
	uffdioRegister      = 0xC020AA00 // struct uffdio_register, 32 bytes
	uffdioCopy          = 0xC028AA03 // struct uffdio_copy, 40 bytes
	uffdioModeMissing   = 1
	uffdMsgSize         = 32
	stallResolveWait    = 300 * time.Millisecond
	stallPage           = 4096
	stallFileBytes      = 2 * stallPage
	stallOldByte        = 'A'
	stallNewByte        = 'B'
	stallEventPageFault = 0x12
)

// stalledWrite is a pwrite(2) of two pages of 'B' over a file of 'A' that copies its first page
// and then stops, inside the kernel, holding whatever a write holds, until resolve: its source's
// second page is registered with userfaultfd and missing, so copying it waits for this test.
type stalledWrite struct {
	uffd     int
	src      []byte // the write's source: page 0 present, page 1 missing until resolve
	fill     []byte // a page of 'B' resolve copies in
	done     chan error
	resolved chan struct{}
}

func startStalledWrite(t *testing.T, w *os.File) *stalledWrite {
	t.Helper()
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno != 0 {
		t.Skipf("userfaultfd: %v (kernel faults need CAP_SYS_PTRACE or vm.unprivileged_userfaultfd)", errno)
	}
	s := &stalledWrite{uffd: int(fd), done: make(chan error, 1), resolved: make(chan struct{})}
	t.Cleanup(func() { unix.Close(s.uffd) })
	api := struct{ api, features, ioctls uint64 }{api: uffdAPI}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.uffd), uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		t.Skipf("UFFDIO_API: %v", errno)
	}
	var err error
	if s.src, err = unix.Mmap(-1, 0, stallFileBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	if s.fill, err = unix.Mmap(-1, 0, stallPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(s.src); unix.Munmap(s.fill) })
	copy(s.src[:stallPage], bytes.Repeat([]byte{stallNewByte}, stallPage)) // present
	copy(s.fill, bytes.Repeat([]byte{stallNewByte}, stallPage))
	reg := struct{ start, len, mode, ioctls uint64 }{
		start: uint64(uintptr(unsafe.Pointer(&s.src[stallPage]))), len: stallPage, mode: uffdioModeMissing}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.uffd), uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		t.Skipf("UFFDIO_REGISTER: %v", errno)
	}
	wfd := w.Fd()
	go func() {
		// The raw call: the race detector would otherwise touch the source and take the fault
		// itself, outside the write.
		n, _, errno := unix.Syscall6(unix.SYS_PWRITE64, wfd, uintptr(unsafe.Pointer(&s.src[0])), stallFileBytes, 0, 0, 0)
		switch {
		case errno != 0:
			s.done <- errno
		case n != stallFileBytes:
			s.done <- unix.EIO
		default:
			s.done <- nil
		}
	}()
	// The fault's message says the write is inside the kernel, stopped at the second page.
	msg := make([]byte, uffdMsgSize)
	if n, err := unix.Read(s.uffd, msg); err != nil || n != uffdMsgSize || msg[0] != stallEventPageFault {
		t.Fatalf("waiting for the write to stall: %d bytes, event %#x, %v", n, msg[0], err)
	}
	t.Cleanup(func() {
		s.resolve(t)
		if err := <-s.done; err != nil {
			t.Errorf("the stalled write: %v", err)
		}
	})
	return s
}

// resolve lets the write copy its second page and finish; it may be called more than once.
func (s *stalledWrite) resolve(t *testing.T) {
	select {
	case <-s.resolved:
		return
	default:
		close(s.resolved)
	}
	cp := struct {
		dst, src, len, mode uint64
		copied              int64
	}{dst: uint64(uintptr(unsafe.Pointer(&s.src[stallPage]))), src: uint64(uintptr(unsafe.Pointer(&s.fill[0]))), len: stallPage}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.uffd), uffdioCopy, uintptr(unsafe.Pointer(&cp))); errno != 0 {
		t.Errorf("UFFDIO_COPY: %v", errno)
	}
}

// stalledFile is a file of 'A' open for reading, with a write of 'B' over it stalled after its
// first page. Reads begun with beginAged take that write's stamp for older than settleTime.
func stalledFile(t *testing.T) (*os.File, *stalledWrite) {
	t.Helper()
	p, f := newFile(t, strings.Repeat(string(rune(stallOldByte)), stallFileBytes))
	needLeases(t, f)
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	t.Cleanup(func() { w.Close() }) // after the stalled write's cleanup has waited for it
	return f, startStalledWrite(t, w)
}

// A write that began more than a second before the read (beginAged) and stalls between the read and its
// check: its times were stamped before the first stat and never move again, the file is held
// open for writing but changed long ago, and a second read at once sees the same torn mix as
// the first. Check must wait the write out (it holds the inode's lock until its last byte) and
// then see the difference. Without that wait Check accepts the torn read.
func TestCheckWaitsOutAStalledWrite(t *testing.T) {
	f, stall := stalledFile(t)
	r, err := beginAged(f)
	must(t, err)
	got := make([]byte, stallFileBytes)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(got, []byte{stallNewByte}) != stallPage || bytes.Count(got, []byte{stallOldByte}) != stallPage {
		t.Fatalf("the read is not the torn mix the stalled write leaves: %q…", got[:8])
	}
	sum := sha256.Sum256(got)
	// The write goes on a while after Check began; Check's wait must not depend on when.
	timer := time.AfterFunc(stallResolveWait, func() { stall.resolve(t) })
	defer timer.Stop()
	wantChanged(t, r.Check(context.Background(), 0, stallFileBytes, sum[:]), "f.txt", "second read differs")
}

// A write that stays stalled is not waited for forever (the wait is an uninterruptible sleep in
// the kernel): after writeWait the read is refused as one of a file still being written.
func TestCheckGivesUpOnAWriteThatDoesNotEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits writeWait (a second) for a write that never ends")
	}
	f, _ := stalledFile(t) // the write is resolved only by its cleanup, after Check
	r, err := beginAged(f)
	must(t, err)
	sum := readAll(t, r, f)
	wantChanged(t, r.Check(context.Background(), 0, stallFileBytes, sum), "f.txt", "still in progress")
}
