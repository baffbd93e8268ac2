package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// stallingReader yields n random bytes, then waits for release (or ctx) and returns err (or the
// context's error). It lets a test cut an upload at a known point, after the runner has
// demonstrably started writing.
type stallingReader struct {
	ctx     context.Context
	left    int
	reached chan struct{}
	release chan struct{}
	err     error
	once    sync.Once
}

func newStallingReader(ctx context.Context, n int, err error) *stallingReader {
	return &stallingReader{ctx: ctx, left: n, reached: make(chan struct{}), release: make(chan struct{}), err: err}
}

func (s *stallingReader) Read(p []byte) (int, error) {
	if s.left > 0 {
		n := min(len(p), s.left)
		for i := range p[:n] {
			p[i] = byte(s.left - i)
		}
		s.left -= n
		return n, nil
	}
	s.once.Do(func() { close(s.reached) })
	select {
	case <-s.release:
		return 0, s.err
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
}

// waitForTemp waits until the runner's temporary file for an upload exists and has data.
func waitForTemp(t *testing.T, dir string, count int) {
	t.Helper()
	eventually(t, 30*time.Second, "the runner to be writing its temporary file(s)", func() bool {
		n := 0
		for _, p := range tempFilesUnder(t, dir) {
			if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
				n++
			}
		}
		return n >= count
	})
}

// A client that goes away mid-upload (its body fails, or its context is cancelled) publishes
// nothing: the target is absent or keeps its old content, and no temporary file remains.
func TestFilesClientDisconnectMidUpload(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	old := []byte("the old content, which must survive\n")
	mustWrite(t, filepath.Join(ws.Root, "existing.bin"), old, 0o644)

	for _, tc := range []struct {
		name, target string
		cancel       bool
	}{
		{"body error, new file", "new.bin", false},
		{"body error, replacing", "existing.bin", false},
		{"context cancelled, new file", "new2.bin", true},
		{"context cancelled, replacing", "existing.bin", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			src := newStallingReader(ctx, 8<<20, errors.New("client crashed"))
			done := make(chan error, 1)
			go func() {
				_, err := cl.WriteFile(ctx, ws.ID, tc.target, src, client.WriteOptions{Replace: true})
				done <- err
			}()
			<-src.reached
			waitForTemp(t, ws.Root, 1)
			if tc.cancel {
				cancel()
			} else {
				close(src.release)
			}
			if err := <-done; err == nil {
				t.Fatal("an interrupted upload reported success")
			}
			eventually(t, 30*time.Second, "the runner to remove its temporary file", func() bool {
				return len(tempFilesUnder(t, ws.Root)) == 0
			})
			got, err := os.ReadFile(filepath.Join(ws.Root, tc.target))
			if tc.target == "existing.bin" {
				if !bytes.Equal(got, old) {
					t.Fatalf("the old content did not survive: %d bytes, %v", len(got), err)
				}
			} else if !os.IsNotExist(err) {
				t.Fatalf("an interrupted upload left %s (%d bytes)", tc.target, len(got))
			}
		})
	}
	// The workspace still works.
	if _, err := cl.WriteFile(context.Background(), ws.ID, "after", bytes.NewReader([]byte("ok")), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A runner SIGKILLed mid-upload cannot remove its temporary file, but it never published one:
// the replaced target keeps its old content whole and a new target does not appear. What a
// crash leaves behind is only `.tether-tmp-*` names, which no write can publish under (see
// TestFilesPutReplaceAndIfSHA256), so they can never pass for finished files.
func TestFilesRunnerKilledMidUpload(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	old := randomBytes(t, 1<<20)
	mustWrite(t, filepath.Join(ws.Root, "victim.bin"), old, 0o644)
	pid := c.runnerPID(t, ws)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type upload struct {
		src  *stallingReader
		done chan error
	}
	var ups []upload
	for _, target := range []string{"victim.bin", "fresh.bin"} {
		u := upload{newStallingReader(ctx, 8<<20, io.EOF), make(chan error, 1)}
		ups = append(ups, u)
		go func() {
			_, err := cl.WriteFile(ctx, ws.ID, target, u.src, client.WriteOptions{Replace: true})
			u.done <- err
		}()
		<-u.src.reached
	}
	waitForTemp(t, ws.Root, 2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the runner to die", func() bool { return !alive(pid) })
	for _, u := range ups {
		// Released with io.EOF, the body ends cleanly from the client's side: only the
		// runner's death can make these fail, and they must.
		close(u.src.release)
		if err := <-u.done; err == nil {
			t.Fatal("an upload to a killed runner reported success")
		} else if code := codeOf(err); code != protocol.CodeUnavailable && code != protocol.CodeFailed {
			t.Logf("upload error (code %q): %v", code, err)
		}
	}
	if got := readHost(t, filepath.Join(ws.Root, "victim.bin")); !bytes.Equal(got, old) {
		t.Fatalf("the replaced file was changed by a killed upload: %d bytes", len(got))
	}
	if _, err := os.Lstat(filepath.Join(ws.Root, "fresh.bin")); !os.IsNotExist(err) {
		t.Fatalf("a killed upload published fresh.bin: %v", err)
	}
	ents, err := os.ReadDir(ws.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "victim.bin" && !bytes.HasPrefix([]byte(e.Name()), []byte(tempPrefix)) {
			t.Errorf("unexpected entry after the crash: %s", e.Name())
		}
	}
}

// A file rewritten while it is read comes back as exactly the old or the new content, verified,
// or the read fails: never silently as a torn mix. The in-place writer overwrites the same bytes
// (same size, no truncation), so the only other states a reader could see are torn ones; the
// renaming writer swaps whole files, which a reader holding the old inode must not mix either.
func TestFilesReadWhileRewritten(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	const size = 4 << 20
	a, b := bytes.Repeat([]byte{'A'}, size), bytes.Repeat([]byte{'B'}, size)
	target := filepath.Join(ws.Root, "hot.bin")

	writers := map[string]func(gen int) error{
		"in place": func(gen int) error {
			f, err := os.OpenFile(target, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([][]byte{a, b}[gen%2], 0)
			return err
		},
		"rename": func(gen int) error {
			tmp := target + ".next"
			if err := os.WriteFile(tmp, [][]byte{a, b}[gen%2], 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, target)
		},
	}
	for name, write := range writers {
		t.Run(name, func(t *testing.T) {
			mustWrite(t, target, a, 0o644)
			stop := make(chan struct{})
			wrote := make(chan int, 1)
			go func() {
				gen := 1
				for {
					select {
					case <-stop:
						wrote <- gen
						return
					default:
					}
					if err := write(gen); err != nil {
						t.Errorf("writer: %v", err)
					}
					gen++
				}
			}()
			var whole, failed int
			for i := 0; i < 60; i++ {
				var buf bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := cl.ReadFile(ctx, ws.ID, "hot.bin", &buf, client.ReadOptions{})
				cancel()
				switch {
				case err != nil:
					failed++
					if code := codeOf(err); code != protocol.CodeChangedDuringCapture && code != protocol.CodeFailed {
						t.Errorf("read %d failed with an unexpected error: %v", i, err)
					}
				case bytes.Equal(buf.Bytes(), a) || bytes.Equal(buf.Bytes(), b):
					whole++
				default:
					t.Errorf("read %d returned a torn mix as verified: %d bytes, %d 'A' and %d 'B'",
						i, buf.Len(), bytes.Count(buf.Bytes(), []byte{'A'}), bytes.Count(buf.Bytes(), []byte{'B'}))
				}
			}
			close(stop)
			gens := <-wrote
			t.Logf("%s: %d whole reads, %d refused, while the writer made %d generations", name, whole, failed, gens)
		})
	}
}
