package runner

import (
	"context"
	"encoding/json"
	"io"
	"reflect"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// handlers serve the controller→runner operations, one entry per operation of protocol.Ops with
// that direction (a test holds the two lists and their argument types together). Whether an
// operation is fenced by the writer epoch comes from the protocol's list, not from here.
var handlers = map[string]opHandler{
	protocol.OpExec:            stream((*Runner).exec).refusedWith(refuseExec),
	protocol.OpTreeImport:      reply((*Runner).treeImport),
	protocol.OpTreeExport:      stream((*Runner).treeExport),
	protocol.OpFsList:          reply((*Runner).fsList),
	protocol.OpFsStat:          reply((*Runner).fsStat),
	protocol.OpFsRead:          stream((*Runner).fsRead),
	protocol.OpFsWrite:         reply((*Runner).fsWrite),
	protocol.OpFsMkdir:         reply((*Runner).fsMkdir),
	protocol.OpFsRemove:        reply((*Runner).fsRemove),
	protocol.OpFsRename:        reply((*Runner).fsRename),
	protocol.OpFsChmod:         reply((*Runner).fsChmod),
	protocol.OpFsUploadChunk:   reply((*Runner).fsUploadChunk),
	protocol.OpFsUploadStatus:  reply((*Runner).fsUploadStatus),
	protocol.OpFsUploadAbort:   reply((*Runner).fsUploadAbort),
	protocol.OpSnapshotCapture: stream((*Runner).snapshotCapture),
	protocol.OpSnapshotRestore: reply((*Runner).snapshotRestore),
	protocol.OpSetEpoch:        replyNoArgs((*Runner).currentEpoch),
	protocol.OpTreeDigest:      reply((*Runner).treeDigest),
	protocol.OpServiceStart:    reply((*Runner).serviceStart),
	protocol.OpServiceList:     replyNoArgs((*Runner).serviceList),
	protocol.OpServiceLogs:     stream((*Runner).serviceLogs),
	protocol.OpServiceStop:     reply((*Runner).serviceStop),
	protocol.OpGitCheckout:     reply((*Runner).gitCheckout),
	protocol.OpGitInspect:      reply((*Runner).gitInspect),
	protocol.OpGitReconcile:    reply((*Runner).gitReconcile),
	protocol.OpGitBranch:       reply((*Runner).gitBranch),
	protocol.OpGitPack:         stream((*Runner).gitPack),
	protocol.OpQuiesce:         reply((*Runner).quiesce),
	protocol.OpRunLogs:         stream((*Runner).runLogs).refusedWith(refuseLogs),
	protocol.OpRunAttach:       stream((*Runner).runAttach).refusedWith(refuseExec),
	protocol.OpRunSignal:       reply((*Runner).runSignal),
	protocol.OpTCPDial:         stream((*Runner).tcpDial),
	protocol.OpFsWatch:         stream((*Runner).fsWatch),
}

// An opHandler is how the runner serves one operation.
type opHandler struct {
	// args is the type the header's Args decode into before the handler runs; nil: the
	// operation takes none, and they are not read.
	args reflect.Type
	// serve answers the operation, or returns the error that refuses it before anything was
	// written (its arguments do not decode).
	serve func(r *Runner, ctx context.Context, st *yamux.Stream, h protocol.Header) error
	// refuse answers an operation refused before it is served (a stale epoch, arguments that do
	// not decode); nil: a trailer carrying the error.
	refuse func(w io.Writer, err error)
}

// refusal answers an operation refused before it was served.
func (o opHandler) refusal(w io.Writer, err error) {
	if o.refuse != nil {
		o.refuse(w, err)
		return
	}
	writeTrailer(w, nil, err)
}

// refusedWith returns o answering its refusals with refuse.
func (o opHandler) refusedWith(refuse func(w io.Writer, err error)) opHandler {
	o.refuse = refuse
	return o
}

// reply serves an operation answered by one trailer carrying fn's result or error.
func reply[A, R any](fn func(r *Runner, ctx context.Context, st *yamux.Stream, args A) (R, error)) opHandler {
	return opHandler{args: reflect.TypeFor[A](), serve: func(r *Runner, ctx context.Context, st *yamux.Stream, h protocol.Header) error {
		var args A
		if err := decodeArgs(h, &args); err != nil {
			return err
		}
		res, err := fn(r, ctx, st, args)
		writeTrailer(st, res, err)
		return nil
	}}
}

// replyNoArgs serves an operation that takes no arguments and is answered by one trailer.
func replyNoArgs[R any](fn func(r *Runner, ctx context.Context) (R, error)) opHandler {
	return opHandler{serve: func(r *Runner, ctx context.Context, st *yamux.Stream, _ protocol.Header) error {
		res, err := fn(r, ctx)
		writeTrailer(st, res, err)
		return nil
	}}
}

// stream serves an operation whose handler writes its own answer: replies, frames, bodies and
// trailers.
func stream[A any](fn func(r *Runner, ctx context.Context, st *yamux.Stream, args A)) opHandler {
	return opHandler{args: reflect.TypeFor[A](), serve: func(r *Runner, ctx context.Context, st *yamux.Stream, h protocol.Header) error {
		var args A
		if err := decodeArgs(h, &args); err != nil {
			return err
		}
		fn(r, ctx, st, args)
		return nil
	}}
}

// refuseExec answers a refused exec the way an exec stream ends: with its exit frame.
func refuseExec(w io.Writer, err error) {
	_ = protocol.NewChannelWriter(w).WriteJSONFrame(protocol.ChanExit, protocol.ExecExit{ExitCode: -1, Error: protocol.AsError(err)})
}

// decodeArgs decodes the header's Args into v; no Args leave v as it is.
func decodeArgs(h protocol.Header, v any) error {
	if len(h.Args) == 0 {
		return nil
	}
	if err := json.Unmarshal(h.Args, v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidArgument, "%s arguments: %v", h.Op, err)
	}
	return nil
}
