package runner

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/service"
)

// shutdownGrace is how long services get between SIGTERM and SIGKILL when the runner shuts down.
const shutdownGrace = 2 * time.Second

// serviceStart starts a service and answers once it is observed ready or has failed. The service
// belongs to the runner: a stream or connection that goes away meanwhile does not stop it.
func (r *Runner) serviceStart(ctx context.Context, _ *yamux.Stream, spec protocol.ServiceSpec) (any, error) {
	if spec.StopPolicy == service.StopOnRunFinish && !r.runs.running(spec.Run) {
		return nil, protocol.Errorf(protocol.CodeConflict, "stop policy on-run-finish: run %q is not running in this workspace", spec.Run)
	}
	st, err := r.services.Start(ctx, spec, r.cfg.Env)
	if spec.StopPolicy == service.StopOnRunFinish && !r.runs.running(spec.Run) {
		// The run ended between the check above and the service being registered.
		r.services.RunFinished(spec.Run)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// serviceList answers with the status of every service.
func (r *Runner) serviceList(context.Context) ([]protocol.ServiceStatus, error) {
	return r.services.List(), nil
}

func (r *Runner) serviceStop(ctx context.Context, _ *yamux.Stream, args protocol.ServiceStopArgs) (any, error) {
	st, err := r.services.Stop(ctx, args.Name, time.Duration(args.Grace))
	if err != nil {
		return nil, err
	}
	return st, nil
}

// serviceLogs answers with the offset the bytes start at, then ChanStdout frames, then a ChanExit
// frame carrying the offset one past the last byte sent. Following ends when the service stops
// or the controller closes the stream.
func (r *Runner) serviceLogs(ctx context.Context, st *yamux.Stream, args protocol.ServiceLogsArgs) {
	svc, err := r.services.Get(args.Name)
	if err != nil {
		writeTrailer(st, nil, err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The controller closes its side when its reader went away: stop following then.
		_, _ = io.Copy(io.Discard, st)
		cancel()
	}()
	cw := protocol.NewChannelWriter(st)
	end, err := svc.Log().Follow(ctx, args.Offset, args.Follow,
		func(from int64) error {
			writeTrailer(st, protocol.ServiceLogsReply{Offset: from}, nil)
			return nil
		},
		func(p []byte) error { return cw.WriteFrame(protocol.ChanStdout, p) })
	overrun := errors.Is(err, service.ErrOverrun)
	if err != nil && !overrun && ctx.Err() == nil {
		return // the stream failed
	}
	_ = cw.WriteJSONFrame(protocol.ChanExit, protocol.ServiceLogsEnd{Offset: end, Overrun: overrun})
}
