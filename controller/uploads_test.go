package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/protocol"
)

// observedUploads is a real store (SQLite, on the test's clock) whose upload heartbeats the
// test watches: each touch is reported on touches, and it can be made to fail.
type observedUploads struct {
	store.Coordination
	clock clockwork.Clock

	mu      sync.Mutex
	touched map[string]time.Time
	by      map[string]string
	forgot  []string
	since   time.Time // LiveUploads' last since
	fail    error     // TouchUpload's error, when set
	touches chan string
}

func newObservedUploads(t *testing.T, clock clockwork.Clock) *observedUploads {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "", t.TempDir(), sqlstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &observedUploads{Coordination: st, clock: clock, touched: map[string]time.Time{}, by: map[string]string{},
		touches: make(chan string, 64)}
}

func (f *observedUploads) TouchUpload(ctx context.Context, key, controller string) error {
	f.mu.Lock()
	err := f.fail
	f.mu.Unlock()
	if err == nil {
		err = f.Coordination.TouchUpload(ctx, key, controller)
	}
	if err == nil {
		f.mu.Lock()
		f.touched[key], f.by[key] = f.clock.Now().UTC(), controller
		f.mu.Unlock()
	}
	select {
	case f.touches <- key:
	default:
	}
	return err
}

func (f *observedUploads) DoneUpload(ctx context.Context, key string) error {
	if err := f.Coordination.DoneUpload(ctx, key); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.touched, key)
	f.forgot = append(f.forgot, key)
	return nil
}

func (f *observedUploads) LiveUploads(ctx context.Context, since time.Time) (map[string]bool, error) {
	f.mu.Lock()
	f.since = since
	f.mu.Unlock()
	return f.Coordination.LiveUploads(ctx, since)
}

// touchedAt is when key was last touched and by which controller.
func (f *observedUploads) touchedAt(key string) (at time.Time, by string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok = f.touched[key]
	return at, f.by[key], ok
}

// nextTouch waits for a TouchUpload of key.
func (f *observedUploads) nextTouch(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-f.touches:
		if k != key {
			t.Fatalf("touched %q; want %q", k, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no touch of %q", key)
	}
}

func liveNow(t *testing.T, tr *uploadTracker) func(string) bool {
	t.Helper()
	live, err := tr.live(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func TestUploadTrackerBeats(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newObservedUploads(t, clock)
	tr := newUploadTracker(f, "ctl-a", clock, slog.New(slog.DiscardHandler))
	const key = "snap/.tmp/0123"

	done := tr.Begin(key)
	// Touched before Begin returns, that is before Put creates the temporary.
	if at, by, ok := f.touchedAt(key); !ok || !at.Equal(clock.Now()) || by != "ctl-a" {
		t.Fatalf("after Begin: touched %v %v by %q; want now by ctl-a", at, ok, by)
	}
	f.nextTouch(t, key)
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil { // the beat's ticker
		t.Fatal(err)
	}
	for range 3 {
		clock.Advance(uploadBeat)
		f.nextTouch(t, key)
	}
	if at, _, _ := f.touchedAt(key); !at.Equal(clock.Now()) {
		t.Fatalf("last touch at %v; want %v", at, clock.Now())
	}
	live := liveNow(t, tr)
	if want := clock.Now().UTC().Add(-uploadLive); !f.since.Equal(want) {
		t.Fatalf("LiveUploads since %v; want %v", f.since, want)
	}
	if !live(key) || live("snap/.tmp/other") {
		t.Fatalf("live(%q) = %v, live(other) = %v; want true, false", key, live(key), live("snap/.tmp/other"))
	}

	done()
	done() // a second call is harmless
	if _, _, ok := f.touchedAt(key); ok || len(f.forgot) != 1 || f.forgot[0] != key {
		t.Fatalf("after done: still touched %v, forgotten %q", ok, f.forgot)
	}
	// The beat has ended (done waits for it): the clock has no ticker left, and no touch follows.
	if err := clock.BlockUntilContext(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * uploadBeat)
	select {
	case k := <-f.touches:
		t.Fatalf("touched %q after done", k)
	default:
	}
	if liveNow(t, tr)(key) {
		t.Fatal("live after done")
	}
}

// A touch counts for uploadLive: another controller's upload whose touches stopped (it crashed)
// stops being live then.
func TestUploadTrackerLapses(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newObservedUploads(t, clock)
	tr := newUploadTracker(f, "ctl-a", clock, slog.New(slog.DiscardHandler))
	if err := f.TouchUpload(context.Background(), "snap/.tmp/crashed", "ctl-b"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(uploadLive)
	if !liveNow(t, tr)("snap/.tmp/crashed") {
		t.Fatal("not live exactly uploadLive after its last touch")
	}
	clock.Advance(time.Millisecond)
	if liveNow(t, tr)("snap/.tmp/crashed") {
		t.Fatal("still live past uploadLive after its last touch")
	}
}

// When touches fail, this controller's own sweeps still see its uploads as live.
func TestUploadTrackerTouchFails(t *testing.T) {
	clock := clockwork.NewFakeClock()
	f := newObservedUploads(t, clock)
	f.fail = errors.New("database unreachable")
	tr := newUploadTracker(f, "ctl-a", clock, slog.New(slog.DiscardHandler))
	const key = "snap/.tmp/0456"
	done := tr.Begin(key)
	f.nextTouch(t, key)
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(uploadBeat)
	f.nextTouch(t, key) // it goes on trying
	if !liveNow(t, tr)(key) {
		t.Fatal("an upload of this controller whose touches failed is not live to its sweep")
	}
	done()
	if liveNow(t, tr)(key) {
		t.Fatal("live after done")
	}
}

// A pin whose first heartbeat cannot be written is refused and holds nothing: other controllers'
// gc would not see it (found in review: it was taken silently).
func TestPinRefusedWhenTheStoreCannotRecordIt(t *testing.T) {
	clock := clockwork.NewFakeClock()
	f := newObservedUploads(t, clock)
	tr := newUploadTracker(f, "ctl-a", clock, slog.New(slog.DiscardHandler))
	release, err := tr.pin("snapshots/ws/a", "snapshots/ws/b")
	if err != nil {
		t.Fatal(err)
	}
	release()
	f.mu.Lock()
	f.fail = errors.New("database unreachable")
	f.mu.Unlock()
	if _, err := tr.pin("snapshots/ws/a", "snapshots/ws/b"); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("pin with the store failing: %v; want unavailable", err)
	}
	pinned, err := tr.pinned(context.Background())
	if err != nil || len(pinned) != 0 {
		t.Fatalf("pinned after a refused pin: %v, %v", pinned, err)
	}
}
