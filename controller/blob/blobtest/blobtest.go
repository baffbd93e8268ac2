package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/blob"
)

// Option adds what the suite cannot do through blob.Store.
type Option func(*config)

type config struct {
	leftovers func(t *testing.T, s blob.Store) []string
	plant     func(t *testing.T, s blob.Store)
}

// Leftovers lists what s holds besides committed objects: temporary objects and incomplete
// multipart uploads. With it the suite asserts that failed Puts leave none.
func Leftovers(fn func(t *testing.T, s blob.Store) []string) Option {
	return func(c *config) { c.leftovers = fn }
}

// Plant leaves in s what a Put that crashed mid-way would (a temporary; for S3 also an
// incomplete multipart upload). With it the suite checks SweepTemporaries removes them.
func Plant(fn func(t *testing.T, s blob.Store)) Option {
	return func(c *config) { c.plant = fn }
}

// Run runs the shared suite; open returns a fresh, empty store for each subtest.
func Run(t *testing.T, open func(t *testing.T) blob.Store, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	s := &suite{config: c, open: open}
	t.Run("RoundTrip", s.roundTrip)
	t.Run("Overwrite", s.overwrite)
	t.Run("NotFoundAndDelete", s.notFound)
	t.Run("List", s.list)
	t.Run("ListExcludesTemporaries", s.listExcludesTemporaries)
	t.Run("WantMismatch", s.wantMismatch)
	t.Run("ReaderFailsMidway", s.readerFails)
	t.Run("CanceledMidway", s.canceledMidway)
	t.Run("CanceledBefore", s.canceledBefore)
	t.Run("Keys", s.keys)
	t.Run("Concurrent", s.concurrent)
	t.Run("Sweep", s.sweep)
}

type suite struct {
	config
	open func(t *testing.T) blob.Store
}

// Code is the ErrorCode in err's chain, or "".
func Code(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}

// RandomBytes is n reproducible pseudo-random bytes.
func RandomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7}).Read(b)
	return b
}

// SHA256 is the hex SHA-256 of b.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// NoLeftovers fails t if the store holds temporaries or incomplete uploads.
func (s *suite) noLeftovers(t *testing.T, st blob.Store) {
	t.Helper()
	if s.leftovers == nil {
		return
	}
	if left := s.leftovers(t, st); len(left) > 0 {
		t.Fatalf("left behind: %q", left)
	}
}

func (s *suite) mustPut(t *testing.T, st blob.Store, key string, data []byte) blob.Info {
	t.Helper()
	info, err := st.Put(context.Background(), key, bytes.NewReader(data), "")
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return info
}

func mustGet(t *testing.T, st blob.Store, key string) ([]byte, blob.Info) {
	t.Helper()
	rc, info, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get %s: read: %v", key, err)
	}
	return b, info
}

func mustBeAbsent(t *testing.T, st blob.Store, key string) {
	t.Helper()
	if info, err := st.Stat(context.Background(), key); Code(err) != blob.CodeNotFound {
		t.Fatalf("Stat %s after a failed Put = %+v, %v; want not_found", key, info, err)
	}
}

func (s *suite) roundTrip(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	// 5 MiB is exactly a part at the smallest part size; 40 MiB spans several parts.
	for i, n := range []int{0, 1, 5 << 20, 40<<20 + 123} {
		key := fmt.Sprintf("rt/size-%d.tar.zst", n)
		data := RandomBytes(n, uint64(i))
		want := SHA256(data)
		info, err := st.Put(ctx, key, bytes.NewReader(data), strings.ToUpper(want))
		if err != nil {
			t.Fatalf("Put %d bytes: %v", n, err)
		}
		if info.Key != key || info.Size != int64(n) || info.SHA256 != want || info.ModTime.IsZero() {
			t.Fatalf("Put %d bytes: info %+v; want size %d sha %s", n, info, n, want)
		}
		stat, err := st.Stat(ctx, key)
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if stat.Key != key || stat.Size != int64(n) || stat.SHA256 != "" && stat.SHA256 != want {
			t.Fatalf("Stat = %+v; want size %d sha %s", stat, n, want)
		}
		got, ginfo := mustGet(t, st, key)
		if ginfo.Size != int64(n) || !bytes.Equal(got, data) {
			t.Fatalf("Get %d bytes: got %d bytes (info %+v), equal=%v", n, len(got), ginfo, bytes.Equal(got, data))
		}
		list, err := st.List(ctx, key)
		if err != nil || len(list) != 1 || list[0].Key != key || list[0].Size != int64(n) {
			t.Fatalf("List(%q) = %+v, %v", key, list, err)
		}
	}
	s.noLeftovers(t, st)
}

func (s *suite) overwrite(t *testing.T) {
	st := s.open(t)
	s.mustPut(t, st, "k", []byte("first"))
	s.mustPut(t, st, "k", []byte("second, longer"))
	if got, _ := mustGet(t, st, "k"); string(got) != "second, longer" {
		t.Fatalf("after overwrite Get = %q", got)
	}
}

func (s *suite) notFound(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	if _, err := st.Stat(ctx, "missing"); Code(err) != blob.CodeNotFound || !blob.IsNotFound(err) {
		t.Fatalf("Stat missing: %v (code %q)", err, Code(err))
	}
	if rc, _, err := st.Get(ctx, "dir/missing"); Code(err) != blob.CodeNotFound {
		if rc != nil {
			rc.Close()
		}
		t.Fatalf("Get missing: %v", err)
	}
	if err := st.Delete(ctx, "missing"); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	s.mustPut(t, st, "a/b", []byte("x"))
	if _, err := st.Stat(ctx, "a"); Code(err) != blob.CodeNotFound {
		t.Fatalf("Stat of a key's parent: %v", err)
	}
	if err := st.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := st.Stat(ctx, "a/b"); Code(err) != blob.CodeNotFound {
		t.Fatalf("Stat after Delete: %v", err)
	}
	if err := st.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}

func (s *suite) list(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	for _, k := range []string{"b/c/d", "a/2", "a/1", "a-b", "ab", "a.x/y"} {
		s.mustPut(t, st, k, []byte(k))
	}
	for prefix, want := range map[string]string{
		"":      "a-b a.x/y a/1 a/2 ab b/c/d",
		"a":     "a-b a.x/y a/1 a/2 ab",
		"a/":    "a/1 a/2",
		"a/1":   "a/1",
		"b/c":   "b/c/d",
		"b/c/":  "b/c/d",
		"b/c/d": "b/c/d",
		"zz":    "",
		"ab/":   "",
	} {
		list, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var keys []string
		for _, i := range list {
			keys = append(keys, i.Key)
			if i.Size != int64(len(i.Key)) {
				t.Fatalf("List(%q): %+v has the wrong size", prefix, i)
			}
		}
		if got := strings.Join(keys, " "); got != want {
			t.Errorf("List(%q) = %q; want %q", prefix, got, want)
		}
	}
	for _, bad := range []string{"/a", "a/../b", "..", "a b"} {
		if _, err := st.List(ctx, bad); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("List(%q): %v; want invalid_argument", bad, err)
		}
	}
}

// listExcludesTemporaries lists while a Put is mid-way (several parts uploaded).
func (s *suite) listExcludesTemporaries(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	s.mustPut(t, st, "done", []byte("x"))
	data := RandomBytes(12<<20, 3)
	pr, pw := io.Pipe()
	type result struct {
		info blob.Info
		err  error
	}
	res := make(chan result, 1)
	go func() {
		info, err := st.Put(ctx, "pending", pr, SHA256(data))
		res <- result{info, err}
	}()
	if _, err := pw.Write(data[:11<<20]); err != nil {
		t.Fatal(err)
	}
	list, err := st.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Key != "done" {
		t.Fatalf("List during a Put = %+v, %v; want only \"done\"", list, err)
	}
	if s.leftovers != nil && len(s.leftovers(t, st)) == 0 {
		t.Fatalf("no temporary visible during a Put: the Leftovers option is not looking in the right place")
	}
	if _, err := pw.Write(data[11<<20:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if r := <-res; r.err != nil || r.info.SHA256 != SHA256(data) {
		t.Fatalf("Put = %+v, %v", r.info, r.err)
	}
	if list, err := st.List(ctx, ""); err != nil || len(list) != 2 {
		t.Fatalf("List after the Put = %+v, %v", list, err)
	}
	s.noLeftovers(t, st)
}

func (s *suite) wantMismatch(t *testing.T) {
	st := s.open(t)
	for _, n := range []int{0, 6 << 20} {
		data := RandomBytes(n, 4)
		_, err := st.Put(context.Background(), "bad", bytes.NewReader(data), SHA256([]byte("other")))
		if Code(err) != blob.CodeCorrupt {
			t.Fatalf("Put with the wrong SHA-256: %v; want code corrupt", err)
		}
		mustBeAbsent(t, st, "bad")
		s.noLeftovers(t, st)
	}
}

// codedError is a source error with its own code, which must survive Put's wrapping.
type codedError struct{}

func (codedError) Error() string     { return "file changed while read" }
func (codedError) ErrorCode() string { return "changed_during_capture" }

// flaky yields data, calling at(ctx) once after limit bytes (returning its error if any).
type flaky struct {
	data  []byte
	off   int
	limit int
	at    func() error
}

func (f *flaky) Read(p []byte) (int, error) {
	if f.off >= f.limit && f.at != nil {
		at := f.at
		f.at = nil
		if err := at(); err != nil {
			return 0, err
		}
	}
	if f.off >= len(f.data) {
		return 0, io.EOF
	}
	end := min(len(f.data), f.off+len(p))
	if f.off < f.limit {
		end = min(end, f.limit)
	}
	n := copy(p, f.data[f.off:end])
	f.off += n
	return n, nil
}

func (s *suite) readerFails(t *testing.T) {
	st := s.open(t)
	old := []byte("the previous version")
	s.mustPut(t, st, "replaced", old)
	for _, key := range []string{"new", "replaced"} {
		for _, limit := range []int{0, 1, 12 << 20} {
			src := &flaky{data: RandomBytes(20<<20, 5), limit: limit, at: func() error { return codedError{} }}
			_, err := st.Put(context.Background(), key, src, "")
			if !errors.Is(err, codedError{}) || Code(err) != "changed_during_capture" {
				t.Fatalf("Put from a reader failing after %d bytes: %v (code %q); want the reader's error", limit, err, Code(err))
			}
			if key == "new" {
				mustBeAbsent(t, st, key)
			} else if got, _ := mustGet(t, st, key); !bytes.Equal(got, old) {
				t.Fatalf("a failed Put changed the existing object")
			}
			s.noLeftovers(t, st)
		}
	}
}

func (s *suite) canceledMidway(t *testing.T) {
	st := s.open(t)
	for _, limit := range []int{1, 12 << 20} {
		ctx, cancel := context.WithCancel(context.Background())
		src := &flaky{data: RandomBytes(20<<20, 6), limit: limit, at: func() error { cancel(); return nil }}
		_, err := st.Put(ctx, "canceled", src, "")
		cancel()
		if !errors.Is(err, context.Canceled) || Code(err) != blob.CodeCanceled {
			t.Fatalf("Put canceled after %d bytes: %v; want context.Canceled", limit, err)
		}
		mustBeAbsent(t, st, "canceled")
		s.noLeftovers(t, st)
	}
}

func (s *suite) canceledBefore(t *testing.T) {
	st := s.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Put(ctx, "k", strings.NewReader("x"), ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context: %v", err)
	}
	mustBeAbsent(t, st, "k")
	s.noLeftovers(t, st)
}

func (s *suite) keys(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	bad := []string{"", "/a", "a/", "a//b", "..", "a/../b", "../a", ".", "a/./b", ".tmp", ".tmp/x",
		"a b", "a\\b", "ä", "a\x00b", "a:b", strings.Repeat("a/", 256) + "a", strings.Repeat("a", 256)}
	for _, key := range bad {
		if _, err := st.Put(ctx, key, strings.NewReader("x"), ""); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Put(%q): %v; want invalid_argument", key, err)
		}
		if _, _, err := st.Get(ctx, key); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Get(%q): %v; want invalid_argument", key, err)
		}
		if _, err := st.Stat(ctx, key); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Stat(%q): %v; want invalid_argument", key, err)
		}
		if err := st.Delete(ctx, key); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Delete(%q): %v; want invalid_argument", key, err)
		}
	}
	for _, want := range []string{"xyz", strings.Repeat("g", 64), strings.Repeat("a", 63)} {
		if _, err := st.Put(ctx, "k", strings.NewReader("x"), want); Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Put with want %q: %v; want invalid_argument", want, err)
		}
	}
	for _, key := range []string{"a", "A.b/c_d-e/0.tar.zst", "..a/b..", "x/.tmp", strings.Repeat("abcd/", 102) + "ab", strings.Repeat("a", 255)} {
		s.mustPut(t, st, key, []byte(key))
		if got, _ := mustGet(t, st, key); string(got) != key {
			t.Errorf("Get(%q) = %q", key, got)
		}
	}
	if list, err := st.List(ctx, ""); err != nil || len(list) != 6 {
		t.Errorf("List = %d objects, %v; want 6", len(list), err)
	}
	s.noLeftovers(t, st)
}

func (s *suite) concurrent(t *testing.T) {
	st := s.open(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			data := RandomBytes(1<<20+i, uint64(i))
			info, err := st.Put(context.Background(), fmt.Sprintf("c/%d", i), bytes.NewReader(data), SHA256(data))
			if err == nil && info.Size != int64(len(data)) {
				err = fmt.Errorf("size %d", info.Size)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if list, err := st.List(context.Background(), "c/"); err != nil || len(list) != 8 {
		t.Fatalf("List = %d objects, %v; want 8", len(list), err)
	}
	s.noLeftovers(t, st)
}

func (s *suite) sweep(t *testing.T) {
	st := s.open(t)
	ctx := context.Background()
	s.mustPut(t, st, "keep/me", []byte("committed"))
	if n, err := st.SweepTemporaries(ctx, 0, nil); err != nil || n != 0 {
		t.Fatalf("SweepTemporaries on a clean store = %d, %v", n, err)
	}
	if s.plant != nil {
		s.plant(t, st)
		s.plant(t, st)
		if len(s.leftovers(t, st)) == 0 {
			t.Fatal("Plant left nothing that Leftovers sees")
		}
		if n, err := st.SweepTemporaries(ctx, time.Hour, nil); err != nil || n != 0 {
			t.Fatalf("SweepTemporaries(1h) removed %d fresh temporaries, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
		left := s.leftovers(t, st)
		everything := func(string) bool { return true }
		if n, err := st.SweepTemporaries(ctx, 10*time.Millisecond, everything); err != nil || n != 0 {
			t.Fatalf("SweepTemporaries with every temporary live removed %d, %v", n, err)
		}
		if after := s.leftovers(t, st); len(after) != len(left) {
			t.Fatalf("SweepTemporaries with every temporary live: %q left of %q", after, left)
		}
		n, err := st.SweepTemporaries(ctx, 10*time.Millisecond, nil)
		if err != nil || n < 2 {
			t.Fatalf("SweepTemporaries = %d, %v; want at least the 2 planted", n, err)
		}
		s.noLeftovers(t, st)
	}
	if got, _ := mustGet(t, st, "keep/me"); string(got) != "committed" {
		t.Fatalf("sweep touched a committed object: %q", got)
	}
}
