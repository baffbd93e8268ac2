package fsguard

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"
)

// TestDirectWriterBytes writes sizes around every boundary the writer has (the buffered prefix,
// the 4 KiB alignment, the chunk) through Write and through io.Copy, and reads back exactly them.
func TestDirectWriterBytes(t *testing.T) {
	dirs := map[string]string{"disk": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "fsguard-direct-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs["tmpfs"] = shm
	}
	src := make([]byte, 3*directChunk+directAlign+7)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	sizes := []int{0, 1, directAlign - 1, directAlign, directAlign + 1, directChunk - 1, directChunk,
		directChunk + 1, 2*directChunk + directAlign, len(src)}
	for kind, dir := range dirs {
		for _, after := range []int64{0, 2 * directAlign, directChunk, -1} {
			for _, size := range sizes {
				for _, via := range []string{"write", "copy", "readfrom", "half", "onebyte", "dataerr"} {
					name := filepath.Join(dir, "f")
					f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					w := &DirectWriter{F: f, After: after}
					if after < 0 {
						// As on a filesystem that refuses O_DIRECT: buffered to the end.
						w.After, w.refused = 0, true
					}
					if via == "write" {
						// Odd-sized writes, so chunk edges fall inside them.
						for off := 0; off < size; off += 777_777 {
							if _, err := w.Write(src[off:min(off+777_777, size)]); err != nil {
								t.Fatal(err)
							}
						}
					} else if _, err := io.Copy(w, sourceVia(via, src[:size])); err != nil {
						t.Fatal(err)
					}
					if err := w.Finish(); err != nil {
						t.Fatalf("%s after=%d size=%d %s: finish: %v", kind, after, size, via, err)
					}
					if kind == "disk" && after >= 0 && int64(size) > after && !w.direct {
						t.Errorf("%s after=%d size=%d %s: never turned to O_DIRECT", kind, after, size, via)
					}
					if after < 0 && w.direct {
						t.Errorf("%s size=%d %s: a refused writer turned to O_DIRECT", kind, size, via)
					}
					if err := f.Close(); err != nil {
						t.Fatal(err)
					}
					got, err := os.ReadFile(name)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, src[:size]) {
						t.Fatalf("%s after=%d size=%d %s: read back %d bytes that differ from the %d written", kind, after, size, via, len(got), size)
					}
				}
			}
		}
	}
}

// TestDirectWriterFailure: a write error of the routine reaches the writer's caller, and Finish
// still ends the routine (the test would hang otherwise) and reports it.
func TestDirectWriterFailure(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &DirectWriter{F: f}
	if _, err := w.Write(make([]byte, directAlign)); err != nil {
		t.Fatal(err)
	}
	if !w.direct {
		t.Skip("this filesystem refuses O_DIRECT")
	}
	// Reopening the descriptor read-only under the writer makes every later write fail.
	ro, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := dup3(int(ro.Fd()), int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 8 && werr == nil; i++ {
		_, werr = w.Write(make([]byte, directChunk))
	}
	ferr := w.Finish()
	if werr == nil && ferr == nil {
		t.Fatal("writes to a read-only descriptor were reported as written")
	}
}

func dup3(oldfd, newfd int) error { return unix.Dup3(oldfd, newfd, unix.O_CLOEXEC) }

// sourceVia reads src the way via names: io.Copy of a bytes.Reader uses its WriteTo (so only
// Write); the others hide WriteTo, so io.Copy calls the writer's ReadFrom, with reads of every
// size a network source gives.
func sourceVia(via string, src []byte) io.Reader {
	r := struct{ io.Reader }{bytes.NewReader(src)}
	switch via {
	case "half":
		return iotest.HalfReader(r)
	case "onebyte":
		if len(src) > 3*directAlign {
			return iotest.HalfReader(r) // one byte at a time would take too long
		}
		return iotest.OneByteReader(r)
	case "dataerr":
		return iotest.DataErrReader(r)
	case "readfrom":
		return r
	}
	return bytes.NewReader(src)
}

// A reader that fails mid-way fails the copy; Finish still ends the routine, more than once.
func TestDirectWriterSourceFails(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &DirectWriter{F: f}
	boom := errors.New("source failed")
	src := io.MultiReader(struct{ io.Reader }{bytes.NewReader(make([]byte, 3*directChunk+5))}, iotest.ErrReader(boom))
	if _, err := io.Copy(w, src); !errors.Is(err, boom) {
		t.Fatalf("copy from a failing source: %v, want %v", err, boom)
	}
	if err := w.Finish(); err != nil {
		t.Fatalf("finish after a failed source: %v", err)
	}
	if err := w.Finish(); err != nil {
		t.Fatalf("a second finish: %v", err)
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Fatal("a write after Finish was taken")
	}
}
