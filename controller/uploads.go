package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Upload heartbeats. A blob Put writes a temporary for as long as its upload runs — minutes for a
// large snapshot — and every controller sharing the bucket sweeps temporaries older than the
// grace when it starts. A temporary's age says nothing about whether its upload is still running,
// so each controller heartbeats the temporaries its Puts hold in the shared store, and a sweep
// leaves alone those anyone touched recently: only a crashed controller's go untouched.

const (
	// uploadBeat is how often a running upload's heartbeat is renewed.
	uploadBeat = time.Second
	// uploadLive is how long a touch keeps an upload live: ten beats, so that a few slow or
	// failed touches (a busy database) do not let a sweep take a running upload, while a dead
	// controller's temporaries are free to sweep soon after. Each controller stamps its touches
	// with its own clock, so it also bounds the clock skew between controllers this tolerates.
	uploadLive = 10 * time.Second
)

// uploadTracker is the blob.UploadTracker of a controller: it heartbeats each temporary a Put
// holds under the controller's id through the store's Coordination role.
type uploadTracker struct {
	st         store.Coordination
	controller string
	clock      clockwork.Clock
	log        *slog.Logger

	mu   sync.Mutex
	held map[string]int // keys this controller's Puts hold now → how many Puts
}

var _ blob.UploadTracker = (*uploadTracker)(nil)

func newUploadTracker(st store.Coordination, controllerID string, clock clockwork.Clock, log *slog.Logger) *uploadTracker {
	return &uploadTracker{st: st, controller: controllerID, clock: clock, log: log, held: map[string]int{}}
}

// Begin touches key at once — Put creates the temporary when Begin returns, so no sweep can see
// it untouched — and then every uploadBeat until done, which stops the beat, waits for it to end
// (so no late touch revives the key) and forgets the key.
func (t *uploadTracker) Begin(key string) (done func()) {
	done, _ = t.begin(key)
	return done
}

// begin is Begin that also reports whether its first touch failed.
func (t *uploadTracker) begin(key string) (done func(), failing bool) {
	t.hold(key, 1)
	ctx, cancel := context.WithCancel(context.Background())
	failing = t.touch(ctx, key, false)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t.beat(ctx, key, failing)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-stopped
			if t.hold(key, -1) > 0 {
				// Another holder of the key (two reads pinning one object) still beats: its
				// heartbeat must not be forgotten under it.
				return
			}
			// Bounded, as it delays the Put's return; a key not forgotten lapses after uploadLive.
			dctx, dcancel := context.WithTimeout(context.Background(), uploadLive)
			defer dcancel()
			if err := t.st.DoneUpload(dctx, key); err != nil {
				t.log.Warn("upload heartbeat: forgetting a finished upload", "key", key, "err", err)
			}
		})
	}, failing
}

// beat touches key every uploadBeat until ctx is canceled.
func (t *uploadTracker) beat(ctx context.Context, key string, failing bool) {
	tick := t.clock.NewTicker(uploadBeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
		failing = t.touch(ctx, key, failing)
	}
}

// touch renews key's heartbeat and reports whether it failed; it logs only when touches start
// or stop failing, not at every beat of a database outage.
func (t *uploadTracker) touch(ctx context.Context, key string, failing bool) bool {
	// A touch later than uploadLive is worth no more than the next one.
	tctx, cancel := context.WithTimeout(ctx, uploadLive)
	err := t.st.TouchUpload(tctx, key, t.controller)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return failing // done meanwhile: the upload is over, the touch no longer matters
	case err != nil && !failing:
		t.log.Warn("upload heartbeat failing: other controllers' sweeps may abort this upload", "key", key, "err", err)
	case err == nil && failing:
		t.log.Info("upload heartbeat resumed", "key", key)
	}
	return err != nil
}

// hold adds n to the holders of key and returns how many are left.
func (t *uploadTracker) hold(key string, n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[key] += n; t.held[key] <= 0 {
		delete(t.held, key)
	}
	return t.held[key]
}

func (t *uploadTracker) holds(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held[key] > 0
}

// live is SweepTemporaries' live for one sweep: the keys any controller touched within
// uploadLive, loaded once now, and those this controller's Puts hold (even if their touches
// failed). Load it just before the sweep: an upload begun after the load is protected only by
// being younger than the sweep's grace. On error, do not sweep temporaries — which of them
// are running is unknown.
func (t *uploadTracker) live(ctx context.Context) (func(key string) bool, error) {
	touched, err := t.st.LiveUploads(ctx, t.clock.Now().UTC().Add(-uploadLive))
	if err != nil {
		return nil, err
	}
	return func(key string) bool { return touched[key] || t.holds(key) }, nil
}

// Pins. The same heartbeats keep gc off the snapshot objects a capture is writing (its receipt
// is not written yet) and those a restore, an export or a saved-copy read is reading (its
// receipt may be removed meanwhile): whatever gc's grace, it deletes no object pinned anywhere
// in the cluster. A pin's heartbeat key names the object and the controller holding it, so
// that one controller's end of a read does not forget another's pin of the same object.

// pinPrefix starts the heartbeat key of a pin; blob keys have no spaces, temporaries' keys no
// such prefix.
const pinPrefix = "pin "

// pin holds each non-empty key pinned until release is called. A pin whose first heartbeat could
// not be written is refused (unavailable): this controller's own sweeps would honor it, but no
// other controller's gc would see it, and a gc with no grace could free what it guards.
func (t *uploadTracker) pin(keys ...string) (release func(), err error) {
	var dones []func()
	release = func() {
		for _, done := range dones {
			done()
		}
	}
	for _, k := range keys {
		if k == "" {
			continue
		}
		done, failing := t.begin(pinPrefix + k + " " + t.controller)
		dones = append(dones, done)
		if failing {
			release()
			return nil, protocol.Errorf(protocol.CodeUnavailable, "could not pin %s against gc in the state store; try again", k)
		}
	}
	return release, nil
}

// pinned returns the objects pinned now: by a heartbeat of any controller within uploadLive,
// or by a pin of this controller (even if its touches failed).
func (t *uploadTracker) pinned(ctx context.Context) (map[string]bool, error) {
	touched, err := t.st.LiveUploads(ctx, t.clock.Now().UTC().Add(-uploadLive))
	if err != nil {
		return nil, fmt.Errorf("pinned snapshot objects: %w", err)
	}
	out := map[string]bool{}
	add := func(hb string) {
		if rest, ok := strings.CutPrefix(hb, pinPrefix); ok {
			key, _, _ := strings.Cut(rest, " ")
			out[key] = true
		}
	}
	for hb := range touched {
		add(hb)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for hb := range t.held {
		add(hb)
	}
	return out, nil
}
