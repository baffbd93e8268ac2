package controller

import (
	"context"
	"errors"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// captureAttempts bounds how often a capture that saw the tree change is started again.
const captureAttempts = 3

// captureWorkspace captures ws, starting again from the beginning when the runner reports that
// the tree changed during the capture (changed_during_capture: a file changed while it was read,
// or the runner's fence found an entry changed after the walk, so the archive would be of no one
// instant). Each attempt is a stream of its own: the runner streams as it reads, so the failed
// attempt's bytes have left already; it aborts its body with the reason, the blob store drops
// what it received, and no receipt is written. Nothing of a failed attempt is ever published.
// After captureAttempts, the last attempt's error is returned.
func (s *Server) captureWorkspace(ctx context.Context, ws api.Workspace) (api.Snapshot, error) {
	return s.captureWorkspaceAs(ctx, ws, captureOpts{})
}

// captureOpts says what kind of capture this is.
type captureOpts struct {
	// checkpoint marks the receipt as the controller's own, and keeps none when the tree is the
	// newest receipt's (the capture then answers errTreeUnchanged with that receipt).
	checkpoint bool
	// full refers to no earlier receipt: every file is read and stored again.
	full bool
}

// captureWorkspaceAs is captureWorkspace with opts; the workspace is busy (busySet) meanwhile.
func (s *Server) captureWorkspaceAs(ctx context.Context, ws api.Workspace, opts captureOpts) (snap api.Snapshot, err error) {
	defer s.busy.hold(ws.ID)()
	start := time.Now()
	defer func() {
		// A checkpoint that found the tree unchanged captured all the same.
		if errors.Is(err, errTreeUnchanged) {
			s.metrics.Capture(time.Since(start), nil)
		} else {
			s.metrics.Capture(time.Since(start), err)
		}
	}()
	for attempt := 1; ; attempt++ {
		snap, err := s.captureOnce(ctx, ws, opts)
		if errors.Is(err, errReceiptRaced) {
			// Another capture's receipt (or a prune) came first: this one's tree may be older
			// than what that receipt holds, so it starts again from the newest receipt, but
			// only while the workspace is as it began: a close that saved meanwhile (closing)
			// is followed by teardown, whose tree must never become the newest receipt.
			if attempt == captureAttempts || ctx.Err() != nil {
				return api.Snapshot{}, err
			}
			now, gerr := s.store.GetWorkspace(ctx, ws.ID)
			if gerr != nil {
				return api.Snapshot{}, gerr
			}
			if now.State != ws.State || now.Epoch != ws.Epoch {
				return api.Snapshot{}, err
			}
			continue
		}
		if protocol.CodeOf(err) != protocol.CodeChangedDuringCapture {
			return snap, err
		}
		if attempt == captureAttempts || ctx.Err() != nil {
			return api.Snapshot{}, protocol.Errorf(protocol.CodeChangedDuringCapture,
				"the tree kept changing during %d capture attempt(s) (stop what writes to it, or snapshot it at rest): %s",
				attempt, protocol.AsError(err).Message)
		}
	}
}
