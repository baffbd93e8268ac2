package forward

import (
	"context"
	"sync"

	"github.com/tetherhq/tether/protocol"
	"golang.org/x/time/rate"
)

// Limits bound what one workspace may have forwarded at once.
type Limits struct {
	// MaxConns is the number of connections (proxied requests' connections, preview and
	// port-forward connections) open into one workspace at once; 0 takes DefaultMaxConns.
	MaxConns int
	// BytesPerSecond is each workspace's bandwidth, both directions together; 0 is unlimited.
	BytesPerSecond int64
}

// DefaultMaxConns is a workspace's connection limit when none is configured: a browser opens
// six connections a host, a dev page a few websockets; 256 leaves room for many tabs.
const DefaultMaxConns = 256

// Limiter holds each workspace's count of open connections and its bandwidth budget.
type Limiter struct {
	limits Limits
	mu     sync.Mutex
	open   map[string]*workspaceBudget
}

type workspaceBudget struct {
	conns int
	bytes *rate.Limiter // nil: unlimited
}

// NewLimiter returns a limiter applying limits to every workspace.
func NewLimiter(limits Limits) *Limiter {
	if limits.MaxConns <= 0 {
		limits.MaxConns = DefaultMaxConns
	}
	return &Limiter{limits: limits, open: map[string]*workspaceBudget{}}
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits { return l.limits }

// A Grant is one admitted connection: Release gives its slot back (once; later calls do
// nothing), and Wait paces its bytes against the workspace's bandwidth.
type Grant struct {
	l        *Limiter
	key      string
	bytes    *rate.Limiter
	released sync.Once
}

// Acquire admits one more connection into the workspace key, or refuses it (CodeUnavailable)
// when the workspace has MaxConns open.
func (l *Limiter) Acquire(key string) (*Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.open[key]
	if b == nil {
		b = &workspaceBudget{}
		if l.limits.BytesPerSecond > 0 {
			// A burst of one copy buffer's worth at least, so a copy never waits for more
			// tokens than the bucket can hold.
			burst := int(max(l.limits.BytesPerSecond, copyBuffer))
			b.bytes = rate.NewLimiter(rate.Limit(l.limits.BytesPerSecond), burst)
		}
		l.open[key] = b
	}
	if b.conns >= l.limits.MaxConns {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "workspace %s has %d connections open, its limit", key, b.conns)
	}
	b.conns++
	return &Grant{l: l, key: key, bytes: b.bytes}, nil
}

// Open is the number of connections open into the workspace key.
func (l *Limiter) Open(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.open[key]; b != nil {
		return b.conns
	}
	return 0
}

// Release gives the connection's slot back.
func (g *Grant) Release() {
	g.released.Do(func() {
		g.l.mu.Lock()
		defer g.l.mu.Unlock()
		b := g.l.open[g.key]
		b.conns--
		if b.conns == 0 && b.bytes == nil {
			// Without a bandwidth budget an idle workspace holds nothing. With one, the bucket
			// stays as it is: were it dropped with the last connection, reconnecting for each
			// chunk would start every chunk with a full bucket and never be slowed.
			delete(g.l.open, g.key)
		}
	})
}

// Wait blocks until n more bytes fit the workspace's bandwidth.
func (g *Grant) Wait(ctx context.Context, n int) error {
	if g == nil || g.bytes == nil {
		return nil
	}
	return g.bytes.WaitN(ctx, n)
}
