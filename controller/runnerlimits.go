package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// RunnerLimits bound what one runner connection can make the controller hold or wait for. A
// runner is untrusted (its sandbox may be fully compromised), so everything it sends is bounded
// before it is buffered: what the controller holds for one runner is at most
// (MaxStreams + protocol.ServerAcceptBacklog) stream windows plus one frame per stream, whatever
// the runner sends. Zero fields take the defaults below.
type RunnerLimits struct {
	// MaxStreams bounds the operation streams a runner may have open towards the controller at
	// once (reports of detached runs, artifact fetches). Streams beyond it wait in yamux's
	// accept backlog; beyond that yamux resets them.
	MaxStreams int
	// MaxHeader bounds the header frame of an operation the runner opens.
	MaxHeader int
	// HeaderWait bounds how long a runner-opened stream may take to send its header.
	HeaderWait time.Duration
	// Idle bounds how long a request/response operation (a capture, a digest) may go without a
	// byte from the runner before it fails with timeout.
	Idle time.Duration
	// MaxSnapshotBytes bounds one snapshot object as it arrives; a capture over it fails with
	// too_large and leaves nothing stored.
	MaxSnapshotBytes int64
	// MaxManifestEntries and MaxManifestBytes bound a capture's manifest: its entries and the
	// size of its JSON, as the controller verifies it.
	MaxManifestEntries int
	MaxManifestBytes   int64
	// MaxRestoreBytes bounds the total length of the files a restore may write (a sparse file
	// counts its whole length); default MaxSnapshotBytes, the most a capture may hold.
	MaxRestoreBytes int64
	// MaxStrikes is how many budget violations a connection may commit before it is closed
	// (the workspace gets an event saying why).
	MaxStrikes int
}

// Default runner limits.
const (
	DefaultRunnerMaxStreams   = 16
	DefaultRunnerMaxHeader    = 64 << 10
	DefaultRunnerHeaderWait   = 30 * time.Second
	DefaultRunnerIdle         = 2 * time.Minute
	DefaultMaxSnapshotBytes   = 64 << 30
	DefaultMaxManifestEntries = 4_000_000
	DefaultMaxManifestBytes   = 1 << 30
	DefaultRunnerMaxStrikes   = 8
	runnerStreamDrainWait     = 5 * time.Second
	// maxHello bounds a runner's hello, which lists its runs and services.
	maxHello                   = 1 << 20
	runnerStreamDrainMaxBuffer = protocol.StreamWindow
)

func (l RunnerLimits) withDefaults() RunnerLimits {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&l.MaxStreams, DefaultRunnerMaxStreams)
	set(&l.MaxHeader, DefaultRunnerMaxHeader)
	set(&l.MaxManifestEntries, DefaultMaxManifestEntries)
	set(&l.MaxStrikes, DefaultRunnerMaxStrikes)
	if l.HeaderWait <= 0 {
		l.HeaderWait = DefaultRunnerHeaderWait
	}
	if l.Idle <= 0 {
		l.Idle = DefaultRunnerIdle
	}
	if l.MaxSnapshotBytes <= 0 {
		l.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if l.MaxRestoreBytes <= 0 {
		l.MaxRestoreBytes = l.MaxSnapshotBytes
	}
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = DefaultMaxManifestBytes
	}
	return l
}

// strike records one budget violation of c's runner; at the connection's MaxStrikes-th, the
// connection is closed and the workspace gets an event, so a runner that keeps pushing is cut
// off rather than merely refused.
func (s *Server) strike(c *hub.Conn, why string) {
	n := c.Strike()
	s.log.Warn("runner over budget", "allocation", c.AllocationID, "workspace", c.WorkspaceID, "strikes", n, "why", why)
	if n != s.cfg.Runners.MaxStrikes {
		return
	}
	cause := fmt.Sprintf("runner of allocation %s disconnected: over budget %d times (last: %s)", c.AllocationID, n, why)
	if err := s.store.RecordEvent(context.WithoutCancel(s.ctx), c.WorkspaceID, cause); err != nil {
		s.log.Error("record event", "workspace", c.WorkspaceID, "err", err)
	}
	s.disconnect(context.WithoutCancel(s.ctx), c.AllocationID)
	c.Close()
}

// serveRunnerOps answers the operations a runner opens: reports of runs that finished detached,
// artifact fetches (which stream a body) and artifact install reports. At most MaxStreams are
// served at once: the next is accepted only when one ends, so the rest wait in yamux's bounded
// backlog with its small initial window instead of being granted a full one each. It runs as the
// routine "runner ops <allocation>" and each operation as "runner op <allocation>"; they end with
// the connection (which the controller's shutdown closes).
func (s *Server) serveRunnerOps(c *hub.Conn) {
	limits := s.cfg.Runners
	slots := make(chan struct{}, limits.MaxStreams)
	for {
		select {
		case slots <- struct{}{}:
		case <-c.Done():
			return
		}
		st, err := c.Accept()
		if err != nil {
			return
		}
		started := s.routines.Go("runner op "+c.AllocationID, func(context.Context) {
			defer func() { <-slots }()
			s.serveRunnerOp(c, st, limits)
		})
		if !started {
			// The controller is shutting down: the operation is not answered.
			st.Close()
			return
		}
	}
}

func (s *Server) serveRunnerOp(c *hub.Conn, st *yamux.Stream, limits RunnerLimits) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(limits.HeaderWait))
	var h protocol.Header
	if err := protocol.ReadJSONLimit(st, &h, limits.MaxHeader); err != nil {
		s.strike(c, fmt.Sprintf("operation header: %v", err))
		_ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.AsError(err)})
		return
	}
	if serve, ok := runnerOps[h.Op]; ok {
		serve(s, c, st, h)
	} else {
		_ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnsupported, "operation %q is not supported by this controller", h.Op)})
	}
	// The slot is held until the runner has closed its side: a stream the runner keeps open
	// after the answer would otherwise keep what it sends buffered while its slot serves
	// another. A runner sends nothing after its request, so anything more is over budget.
	_ = st.SetReadDeadline(time.Now().Add(runnerStreamDrainWait))
	switch n, err := io.CopyN(io.Discard, st, runnerStreamDrainMaxBuffer); {
	case n > 0:
		s.strike(c, fmt.Sprintf("operation %s: the runner sent %d bytes after its request", h.Op, n))
	case errors.Is(err, yamux.ErrTimeout):
		s.strike(c, fmt.Sprintf("operation %s: the runner kept the stream open after the answer", h.Op))
	}
}
