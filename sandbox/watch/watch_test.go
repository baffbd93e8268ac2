package watch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

func TestEventsInOrder(t *testing.T) {
	f := newFixture(t)
	must(t, os.Mkdir(f.path("src"), 0o755))
	w := f.start(t, "src", Options{})
	must(t, os.WriteFile(f.path("src/a.go"), []byte("x"), 0o644))
	must(t, os.Chmod(f.path("src/a.go"), 0o600))
	fh, err := os.OpenFile(f.path("src/a.go"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = fh.WriteString("y")
	must(t, err)
	must(t, fh.Close())
	must(t, os.Rename(f.path("src/a.go"), f.path("src/b.go")))
	must(t, os.Mkdir(f.path("src/d"), 0o755))
	must(t, os.Remove(f.path("src/b.go")))
	pump(t, w)
	rename := protocol.WatchEvent{Type: protocol.WatchRename, Path: "src/b.go", OldPath: "src/a.go"}
	want := []protocol.WatchEvent{
		ev(protocol.WatchCreate, "src/a.go", false),
		ev(protocol.WatchWrite, "src/a.go", false), // os.WriteFile's write
		ev(protocol.WatchChmod, "src/a.go", false),
		// The append: two writes in a row would be one (the kernel merges identical events
		// not yet read).
		ev(protocol.WatchWrite, "src/a.go", false),
		rename,
		ev(protocol.WatchCreate, "src/d", true),
		ev(protocol.WatchRemove, "src/b.go", false),
	}
	expect(t, w, want...)
}

func TestNotRecursiveIgnoresSubdirectories(t *testing.T) {
	f := newFixture(t)
	must(t, os.MkdirAll(f.path("sub"), 0o755))
	w := f.start(t, ".", Options{})
	must(t, os.WriteFile(f.path("sub/f"), nil, 0o644))
	must(t, os.WriteFile(f.path("top"), nil, 0o644))
	pump(t, w)
	want := []protocol.WatchEvent{ev(protocol.WatchCreate, "top", false)}
	expect(t, w, want...)
}

func TestRecursiveWatchesNewDirectoriesAndReportsWhatTheyHeld(t *testing.T) {
	f := newFixture(t)
	must(t, os.MkdirAll(f.path("old/deep"), 0o755))
	w := f.start(t, ".", Options{Recursive: true})
	if w.Watches() != 3 {
		t.Fatalf("watches = %d, want 3 (., old, old/deep)", w.Watches())
	}
	must(t, os.WriteFile(f.path("old/deep/f"), nil, 0o644))
	// Made before the watcher reads the create of "new": the classic race, which the listing
	// of each new directory covers.
	must(t, os.MkdirAll(f.path("new/a/b"), 0o755))
	must(t, os.WriteFile(f.path("new/a/b/f"), nil, 0o644))
	pump(t, w)
	got := queued(w)
	seen := map[string]bool{}
	for _, e := range got {
		if e.Type == protocol.WatchCreate {
			seen[e.Path] = true
		}
	}
	for _, p := range []string{"old/deep/f", "new", "new/a", "new/a/b", "new/a/b/f"} {
		if !seen[p] {
			t.Errorf("no create of %s in %+v", p, got)
		}
	}
	// The new directories are watched now.
	must(t, os.WriteFile(f.path("new/a/b/g"), nil, 0o644))
	pump(t, w)
	if got := queued(w); len(got) == 0 || got[0] != ev(protocol.WatchCreate, "new/a/b/g", false) {
		t.Fatalf("after the walk: %+v", got)
	}
}

func TestRecursiveRenamedDirectoryKeepsItsWatchesUnderItsNewName(t *testing.T) {
	f := newFixture(t)
	must(t, os.MkdirAll(f.path("w/a/b"), 0o755))
	must(t, os.MkdirAll(f.path("elsewhere"), 0o755))
	w := f.start(t, "w", Options{Recursive: true})
	must(t, os.Rename(f.path("w/a"), f.path("w/c")))
	must(t, os.WriteFile(f.path("w/c/b/f"), nil, 0o644))
	// Moved out of the watched tree: removed here, and no longer watched.
	must(t, os.Rename(f.path("w/c"), f.path("elsewhere/c")))
	must(t, os.WriteFile(f.path("elsewhere/c/b/g"), nil, 0o644))
	pump(t, w)
	want := []protocol.WatchEvent{
		{Type: protocol.WatchRename, Path: "w/c", OldPath: "w/a", IsDir: true},
		ev(protocol.WatchCreate, "w/c/b/f", false),
		ev(protocol.WatchRemove, "w/c", true),
	}
	expect(t, w, want...)
	if w.Watches() != 1 {
		t.Fatalf("watches = %d after the tree left, want 1", w.Watches())
	}
}

func TestRecursiveDoesNotFollowSymlinks(t *testing.T) {
	f := newFixture(t)
	w := f.start(t, ".", Options{Recursive: true})
	must(t, os.Symlink(f.outside, f.path("out")))
	must(t, os.WriteFile(filepath.Join(f.outside, "secret"), nil, 0o644))
	pump(t, w)
	want := []protocol.WatchEvent{ev(protocol.WatchCreate, "out", false)}
	expect(t, w, want...)
}

func TestStartRefusesWhatTheGuardRefuses(t *testing.T) {
	f := newFixture(t)
	must(t, os.Symlink(f.outside, f.path("link")))
	must(t, os.Mkdir(f.path("d"), 0o755))
	must(t, os.Symlink("d", f.path("inside-link")))
	must(t, os.WriteFile(f.path("file"), nil, 0o644))
	for _, c := range []struct{ path, code string }{
		{"link", fsguard.CodeSymlinkRefused},
		{"inside-link", fsguard.CodeSymlinkRefused},
		{"link/x", fsguard.CodeSymlinkRefused},
		{"../outside", fsguard.CodePathEscape},
		{"/etc", fsguard.CodePathEscape},
		{"file", fsguard.CodeNotDirectory},
		{"missing", fsguard.CodeNotFound},
	} {
		w, err := Start(f.root, c.path, Options{Recursive: true})
		if err == nil {
			w.Close()
		}
		if got := fsguard.CodeOf(err); got != c.code {
			t.Errorf("%s: got %v (%s), want %s", c.path, err, got, c.code)
		}
	}
}

func TestTetherTemporariesAreNotReported(t *testing.T) {
	f := newFixture(t)
	w := f.start(t, ".", Options{Recursive: true})
	if _, err := f.root.WriteFile(context.Background(), "written", bytes.NewReader([]byte("data")), 0o644, fsguard.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	pump(t, w)
	want := []protocol.WatchEvent{ev(protocol.WatchCreate, "written", false)}
	expect(t, w, want...)
}

func TestQueueOverflowDropsAndSaysSo(t *testing.T) {
	f := newFixture(t)
	w := f.start(t, ".", Options{QueueLen: 4})
	for i := range 100 {
		must(t, os.WriteFile(f.path("f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), nil, 0o644))
	}
	pump(t, w)
	got := queued(w)
	if len(got) != 4 || got[3].Type != protocol.WatchOverflow || got[3].Reason == "" {
		t.Fatalf("a full queue of 4: %+v", got)
	}
	for _, e := range got[:3] {
		if e.Type != protocol.WatchCreate {
			t.Fatalf("before the overflow: %+v", got)
		}
	}
	// Drained, the watch goes on.
	must(t, os.WriteFile(f.path("after"), nil, 0o644))
	pump(t, w)
	if got := queued(w); !reflect.DeepEqual(got, []protocol.WatchEvent{ev(protocol.WatchCreate, "after", false)}) {
		t.Fatalf("after draining: %+v", got)
	}
}

func TestWatchLimitIsReported(t *testing.T) {
	f := newFixture(t)
	for _, d := range []string{"a", "b", "c"} {
		must(t, os.Mkdir(f.path(d), 0o755))
	}
	w := f.start(t, ".", Options{Recursive: true, MaxWatches: 2})
	got := queued(w)
	if len(got) != 1 || got[0].Type != protocol.WatchOverflow || got[0].Path == "" || !strings.Contains(got[0].Reason, "2 directories") {
		t.Fatalf("past the bound: %+v", got)
	}
	if w.Watches() != 2 {
		t.Fatalf("watches = %d, want 2", w.Watches())
	}
	// Reported once, not per directory.
	must(t, os.Mkdir(f.path("d"), 0o755))
	pump(t, w)
	if got := queued(w); !reflect.DeepEqual(got, []protocol.WatchEvent{ev(protocol.WatchCreate, "d", true)}) {
		t.Fatalf("after the bound: %+v", got)
	}
}

func TestRunEndsWhenTheDirectoryGoesOrTheContextEnds(t *testing.T) {
	f := newFixture(t)
	must(t, os.Mkdir(f.path("w"), 0o755))
	w := f.start(t, "w", Options{})
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	must(t, os.WriteFile(f.path("w/f"), nil, 0o644))
	if e := <-w.Events(); e.Type != protocol.WatchCreate || e.Path != "w/f" {
		t.Fatalf("first event %+v", e)
	}
	must(t, os.RemoveAll(f.path("w")))
	var got []protocol.WatchEvent
	for e := range w.Events() {
		e.Time = time.Time{}
		got = append(got, e)
	}
	if err := <-done; !errors.Is(err, ErrGone) {
		t.Fatalf("Run: %v, want ErrGone", err)
	}
	want := []protocol.WatchEvent{ev(protocol.WatchRemove, "w/f", false), ev(protocol.WatchRemove, "w", true)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", got, want)
	}

	w2 := f.start(t, ".", Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w2.Run(ctx) }()
	cancel()
	for range w2.Events() {
	}
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}
