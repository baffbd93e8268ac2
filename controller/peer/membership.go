package peer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/store"
)

// Timing of membership. A member is alive while its last heartbeat is younger than TTL. A
// controller stops acting as an owner (it drops its runners and admits none) once it could not
// write a heartbeat for Lapse, which is shorter than TTL: by the time peers consider it dead and
// let its runners' reconnects make them owners, it has let go of them itself — so no runner has
// two owners acting at once, as long as clocks agree to within TTL − Lapse.
type Timing struct {
	Interval time.Duration // how often a controller writes its heartbeat
	TTL      time.Duration
	Lapse    time.Duration
}

// DefaultTiming is the timing controllers use unless configured otherwise.
var DefaultTiming = Timing{Interval: 500 * time.Millisecond, TTL: 3 * time.Second, Lapse: 2 * time.Second}

// Membership is one controller's part in the cluster: its heartbeat, and its view of the others'.
type Membership struct {
	store  store.Members
	self   store.Member
	timing Timing
	clock  clockwork.Clock
	log    *slog.Logger

	mu      sync.Mutex
	lastOK  time.Time // when the last heartbeat was written (this process's clock)
	lapsed  bool
	running bool // Run is writing heartbeats
	alone   bool // no other controller can share the store (SetAlone)
}

// SetAlone says no other controller can share this controller's store (SQLite in its locked data
// directory): no peer can ever take its runners over, so a heartbeat it could not write (a busy
// disk) is logged and never a lapse. Dropping the runners would only break their work.
func (m *Membership) SetAlone() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alone = true
}

// NewMembership prepares self's membership; Beat writes its first heartbeat.
func NewMembership(st store.Members, self store.Member, timing Timing, clock clockwork.Clock, log *slog.Logger) *Membership {
	return &Membership{store: st, self: self, timing: timing, clock: clock, log: log}
}

// Self is this controller's id.
func (m *Membership) Self() string { return m.self.ID }

// Address is the base URL peers reach this controller on.
func (m *Membership) Address() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self.Address
}

// SetAddress sets the base URL peers reach this controller on, for the next heartbeat (a
// controller knows its address once it listens).
func (m *Membership) SetAddress(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.self.Address = addr
}

// Timing is the membership's timing.
func (m *Membership) Timing() Timing { return m.timing }

// Beat writes one heartbeat.
func (m *Membership) Beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timing.Lapse)
	defer cancel()
	m.mu.Lock()
	self := m.self
	m.mu.Unlock()
	if _, err := m.store.Heartbeat(ctx, self); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastOK = m.clock.Now()
	if m.lapsed {
		m.lapsed = false
		m.log.Info("heartbeat written again: acting as an owner again")
	}
	return nil
}

// Run writes a heartbeat every Interval until ctx ends. When none could be written for Lapse it
// calls onLapse once (the controller drops the runners it holds), and again after each recovery.
func (m *Membership) Run(ctx context.Context, onLapse func()) {
	m.mu.Lock()
	m.running = true
	m.mu.Unlock()
	t := m.clock.NewTicker(m.timing.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		err := m.Beat(ctx)
		if err == nil || ctx.Err() != nil {
			continue
		}
		m.log.Warn("heartbeat not written", "err", err)
		if m.markLapsed() {
			m.log.Warn("no heartbeat written for the lapse: dropping the runners held here until one is", "lapse", m.timing.Lapse)
			onLapse()
		}
	}
}

// markLapsed records a lapse once the last heartbeat is older than Lapse, and says whether this
// is its start.
func (m *Membership) markLapsed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alone || m.lapsed || m.clock.Since(m.lastOK) < m.timing.Lapse {
		return false
	}
	m.lapsed = true
	return true
}

// Owning says whether this controller may hold runners: its last heartbeat was written within
// Lapse. A controller whose heartbeats are not running (one serving its handler alone, as
// tests do) is on its own and always owns.
func (m *Membership) Owning() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running || m.alone {
		return true
	}
	return !m.lapsed && !m.lastOK.IsZero() && m.clock.Since(m.lastOK) < m.timing.Lapse
}

// Alive says whether a member's last heartbeat is younger than TTL (measured on the store's
// clock, which stamped it, against this controller's).
func (m *Membership) Alive(mem store.Member) bool {
	return mem.ID == m.self.ID || m.clock.Since(mem.HeartbeatAt) < m.timing.TTL
}
