package runner

import (
	"bufio"
	"context"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/watch"
)

// fsWatch answers the watch's start (or its refusal) in a trailer, then sends one
// ChanWatchEvent frame per event until the controller closes the stream, the connection ends or
// the runner stops. A watch that ends on its own (its directory was removed) sends a ChanError
// frame last. The kernel's events are read into the watcher's bounded queue whatever the
// controller's pace: a controller that reads slowly gets an overflow event, never a runner that
// blocks or grows.
func (r *Runner) fsWatch(ctx context.Context, st *yamux.Stream, args protocol.FsWatchArgs) {
	root, err := fsguard.Open(r.root, fsguard.WithHolds(r.holds))
	if err != nil {
		writeTrailer(st, nil, err)
		return
	}
	defer root.Close()
	w, err := watch.Start(root, args.Path, watch.Options{Recursive: args.Recursive, Clock: r.cfg.Clock})
	if err != nil {
		writeTrailer(st, nil, err)
		return
	}
	defer w.Close()
	writeTrailer(st, protocol.FsWatchStarted{Path: w.Path(), Watches: w.Watches()}, nil)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The controller closes its side when its client went away: stop watching then.
		_, _ = io.Copy(io.Discard, st)
		cancel()
	}()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	_ = st.SetWriteDeadline(time.Time{})
	// Frames are batched while more events wait, and flushed when the queue is empty.
	bw := bufio.NewWriterSize(st, 32<<10)
	cw := protocol.NewChannelWriter(bw)
	for ev := range w.Events() {
		err := cw.WriteJSONFrame(protocol.ChanWatchEvent, ev)
		if err == nil && len(w.Events()) == 0 {
			err = bw.Flush()
		}
		if err != nil {
			cancel() // the stream is gone; Run ends and closes Events
		}
	}
	if err := <-done; err != nil && ctx.Err() == nil {
		_ = cw.WriteJSONFrame(protocol.ChanError, protocol.AsError(err))
		_ = bw.Flush()
	}
}
