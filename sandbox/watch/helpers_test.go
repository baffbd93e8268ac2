package watch

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a workspace root beside a directory outside it.
type fixture struct {
	dir, outside string
	root         *fsguard.Root
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{dir: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must(t, os.MkdirAll(f.dir, 0o755))
	must(t, os.MkdirAll(f.outside, 0o755))
	root, err := fsguard.Open(f.dir)
	must(t, err)
	t.Cleanup(func() { root.Close() })
	f.root = root
	return f
}

func (f *fixture) path(rel string) string { return filepath.Join(f.dir, filepath.FromSlash(rel)) }

func (f *fixture) start(t *testing.T, rel string, o Options) *Watcher {
	t.Helper()
	w, err := Start(f.root, rel, o)
	must(t, err)
	t.Cleanup(w.Close)
	return w
}

// pump hands the watcher everything the kernel has queued, without Run: the kernel queues an
// event before the system call that caused it returns, so after the test's changes, a read that
// finds nothing means there is nothing more.
func pump(t *testing.T, w *Watcher) {
	t.Helper()
	buf := make([]byte, readBuf)
	for {
		var n int
		var rerr error
		// One non-blocking read: EAGAIN means the kernel holds nothing more.
		must(t, w.rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}))
		if errors.Is(rerr, unix.EAGAIN) {
			return
		}
		must(t, rerr)
		must(t, w.handle(buf[:n], n > len(buf)-(eventHeader+unix.NAME_MAX+1)))
	}
}

// queued takes every event waiting in the queue, times cleared.
func queued(w *Watcher) []protocol.WatchEvent {
	var out []protocol.WatchEvent
	for {
		select {
		case ev := <-w.events:
			ev.Time = time.Time{}
			out = append(out, ev)
		default:
			return out
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ev(typ, p string, isDir bool) protocol.WatchEvent {
	return protocol.WatchEvent{Type: typ, Path: p, IsDir: isDir}
}

// expect pumps the kernel's events and checks that the queue holds exactly want (times cleared).
func expect(t *testing.T, w *Watcher, want ...protocol.WatchEvent) {
	t.Helper()
	pump(t, w)
	if got := queued(w); !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", got, want)
	}
}
