package runner

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// memRunner makes a runner and an in-memory yamux connection: the runner's end and the
// controller's, closed when the test ends.
func memRunner(t *testing.T) (r *Runner, runnerSide, ctlSide *yamux.Session) {
	t.Helper()
	r, err := New(Config{ControllerURL: "http://127.0.0.1:1", Token: "tbt_x", AllocationID: "al_test", Root: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.logs.Close() })
	a, b := net.Pipe()
	if runnerSide, err = protocol.MuxClient(a); err != nil {
		t.Fatal(err)
	}
	if ctlSide, err = protocol.MuxServer(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctlSide.Close(); runnerSide.Close() })
	return r, runnerSide, ctlSide
}

// pipeRunner serves a runner over an in-memory yamux session and returns the controller's end.
func pipeRunner(t *testing.T) (*Runner, *yamux.Session) {
	t.Helper()
	r, runnerSide, ctlSide := memRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = r.serve(ctx, runnerSide) }()
	t.Cleanup(cancel)
	return r, ctlSide
}

func op(t *testing.T, sess *yamux.Session, name string, epoch uint64, args any) protocol.Trailer {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw, _ := json.Marshal(args)
	if err := protocol.WriteJSON(st, protocol.Header{Op: name, Epoch: epoch, Args: raw}); err != nil {
		t.Fatal(err)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

// A mutating operation that carries an older epoch than the runner has seen is refused by the
// runner itself, however late it arrives and whatever the controller thought.
func TestRunnerFencesStaleEpochs(t *testing.T) {
	r, sess := pipeRunner(t)
	if tr := op(t, sess, protocol.OpSetEpoch, 5, struct{}{}); !tr.OK {
		t.Fatalf("set_epoch: %+v", tr.Error)
	}
	tr := op(t, sess, protocol.OpFsMkdir, 4, protocol.FsPathArgs{Path: "late"})
	if tr.OK || tr.Error.Code != protocol.CodeStaleEpoch {
		t.Fatalf("mkdir with a stale epoch: %+v", tr)
	}
	if _, err := os.Stat(filepath.Join(r.cfg.Root, "late")); err == nil {
		t.Fatal("a stale write changed the workspace")
	}
	if tr := op(t, sess, protocol.OpFsMkdir, 5, protocol.FsPathArgs{Path: "current"}); !tr.OK {
		t.Fatalf("mkdir with the current epoch: %+v", tr.Error)
	}
	// A newer epoch raises the fence; reads need none.
	if tr := op(t, sess, protocol.OpFsMkdir, 7, protocol.FsPathArgs{Path: "newer"}); !tr.OK {
		t.Fatalf("mkdir with a newer epoch: %+v", tr.Error)
	}
	if tr := op(t, sess, protocol.OpFsMkdir, 5, protocol.FsPathArgs{Path: "again"}); tr.OK {
		t.Fatal("epoch 5 admitted after epoch 7")
	}
	if tr := op(t, sess, protocol.OpFsStat, 0, protocol.FsPathArgs{Path: "current"}); !tr.OK {
		t.Fatalf("stat (a read) with no epoch: %+v", tr.Error)
	}
	// Exec answers on its exit channel.
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(protocol.ExecArgs{Argv: []string{"touch", "ran"}})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpExec, Epoch: 6, Args: raw}); err != nil {
		t.Fatal(err)
	}
	ch, p, err := protocol.ReadFrame(st, nil)
	if err != nil || ch != protocol.ChanExit {
		t.Fatalf("stale exec: channel %d, %v", ch, err)
	}
	var exit protocol.ExecExit
	if err := json.Unmarshal(p, &exit); err != nil || exit.Error == nil || exit.Error.Code != protocol.CodeStaleEpoch {
		t.Fatalf("stale exec: %+v, %v", exit, err)
	}
	if _, err := os.Stat(filepath.Join(r.cfg.Root, "ran")); err == nil {
		t.Fatal("a stale exec ran")
	}
}
