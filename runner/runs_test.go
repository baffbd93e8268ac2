package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/confine"
	"github.com/tetherhq/tether/sandbox/process"
	"github.com/tetherhq/tether/sandbox/runlog"
)

// openOp opens a stream carrying op's header.
func openOp(t *testing.T, sess *yamux.Session, name string, args any) *yamux.Stream {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(args)
	if err := protocol.WriteJSON(st, protocol.Header{Op: name, Args: raw}); err != nil {
		t.Fatal(err)
	}
	_ = st.SetReadDeadline(time.Now().Add(60 * time.Second))
	return st
}

// runRead is what a reader of a run's stream received.
type runRead struct {
	stdout, stderr bytes.Buffer
	started        *protocol.ExecStarted
	exit           *protocol.ExecExit
	gaps           []protocol.LogGap
	end            *protocol.LogEnd
	refused        *protocol.Error
}

// read reads frames until the stream's last frame, or until stop says enough.
func (rr *runRead) read(t *testing.T, st *yamux.Stream, stop func() bool) {
	t.Helper()
	for {
		ch, p, err := protocol.ReadFrame(st, nil)
		if err != nil {
			t.Fatalf("frame: %v (stdout so far %q)", err, tail(rr.stdout.String()))
		}
		switch ch {
		case protocol.ChanStdout:
			rr.stdout.Write(p)
		case protocol.ChanStderr:
			rr.stderr.Write(p)
		case protocol.ChanStarted:
			rr.started = &protocol.ExecStarted{}
			mustJSON(t, p, rr.started)
		case protocol.ChanGap:
			var g protocol.LogGap
			mustJSON(t, p, &g)
			rr.gaps = append(rr.gaps, g)
		case protocol.ChanExit:
			rr.exit = &protocol.ExecExit{}
			mustJSON(t, p, rr.exit)
			return
		case protocol.ChanLogEnd:
			rr.end = &protocol.LogEnd{}
			mustJSON(t, p, rr.end)
			return
		case protocol.ChanError:
			rr.refused = &protocol.Error{}
			mustJSON(t, p, rr.refused)
			return
		}
		if stop != nil && stop() {
			return
		}
	}
}

func mustJSON(t *testing.T, p []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(p, v); err != nil {
		t.Fatalf("frame %q: %v", p, err)
	}
}

func tail(s string) string { return s[max(0, len(s)-200):] }

// waitEnded waits until run id finished.
func waitEnded(t *testing.T, r *Runner, id string) protocol.RunStatus {
	t.Helper()
	e, err := r.runs.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.ended:
	case <-time.After(60 * time.Second):
		t.Fatalf("run %s did not end", id)
	}
	return r.runs.status(id)
}

func seqLines(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

// Output a run writes while its stream is dropped is all replayed by an attach from the offsets
// the first reader reached: nothing lost, nothing doubled.
func TestAttachReplaysOutputWrittenWhileDropped(t *testing.T) {
	r, _, _ := memRunner(t)
	sess1 := reconnect(t, r)
	script := `seq 1 30000; seq 1 3000 >&2; while [ ! -e go ]; do sleep 0.01; done; seq 30001 300000; seq 3001 9000 >&2; exit 4`
	st := openOp(t, sess1, protocol.OpExec, protocol.ExecArgs{RunID: "run_replay", Argv: []string{"sh", "-c", script}})
	var first runRead
	first.read(t, st, func() bool { return first.stdout.Len() >= 64<<10 })
	if first.started == nil || first.started.RunID != "run_replay" || first.started.PID == 0 {
		t.Fatalf("started %+v", first.started)
	}
	sess1.Close() // the connection drops mid-output
	if err := os.WriteFile(filepath.Join(r.cfg.Root, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	status := waitEnded(t, r, "run_replay")
	if status.Exit.ExitCode != 4 || status.Output == nil || status.Output.StdoutEnd != int64(len(seqLines(1, 300000))) {
		t.Fatalf("status %+v output %+v", status, status.Output)
	}

	sess2 := reconnect(t, r)
	st2 := openOp(t, sess2, protocol.OpRunAttach, protocol.RunAttachArgs{RunID: "run_replay",
		StdoutOffset: int64(first.stdout.Len()), StderrOffset: int64(first.stderr.Len())})
	var second runRead
	second.read(t, st2, nil)
	if second.started == nil || second.exit == nil || second.exit.ExitCode != 4 || len(second.gaps) != 0 {
		t.Fatalf("attach: started %+v exit %+v gaps %v", second.started, second.exit, second.gaps)
	}
	for _, c := range []struct {
		name          string
		first, second []byte
		want          []byte
	}{
		{"stdout", first.stdout.Bytes(), second.stdout.Bytes(), seqLines(1, 300000)},
		{"stderr", first.stderr.Bytes(), second.stderr.Bytes(), seqLines(1, 9000)},
	} {
		got := sha256.Sum256(append(append([]byte{}, c.first...), c.second...))
		if got != sha256.Sum256(c.want) {
			t.Errorf("%s: %d + %d bytes differ from the %d written", c.name, len(c.first), len(c.second), len(c.want))
		}
	}
}

// Under a tiny per-run bound, run_logs reports exactly the range dropped, then every byte held,
// and ends with where it stopped and the exit; bad reads are refused with one error frame.
func TestRunLogsGapsUnderTinyBound(t *testing.T) {
	r, sess := pipeRunner(t)
	r.logs = runlog.NewStore(t.TempDir(), runlog.Options{MaxRunBytes: 4096})
	st := openOp(t, sess, protocol.OpExec, protocol.ExecArgs{RunID: "run_tiny", Detach: true, Argv: []string{"sh", "-c", "seq 1 10000; echo oops >&2"}})
	var started runRead
	started.read(t, st, func() bool { return started.started != nil })
	status := waitEnded(t, r, "run_tiny")
	want := seqLines(1, 10000)
	out := status.Output
	if out == nil || out.StdoutEnd != int64(len(want)) || out.StdoutStart == 0 || out.StdoutEnd-out.StdoutStart > 4096 || out.StderrEnd != 5 {
		t.Fatalf("output %+v", out)
	}

	var logs runRead
	logs.read(t, openOp(t, sess, protocol.OpRunLogs, protocol.RunLogsArgs{RunID: "run_tiny", StdoutOffset: 10}), nil)
	// The stderr bytes may have gone too (oldest segments first); whatever went is reported.
	var stdoutGaps []protocol.LogGap
	for _, g := range logs.gaps {
		if g.Stream == protocol.StreamStdout {
			stdoutGaps = append(stdoutGaps, g)
		}
	}
	if len(stdoutGaps) != 1 || stdoutGaps[0] != (protocol.LogGap{Stream: protocol.StreamStdout, From: 10, To: out.StdoutStart}) {
		t.Fatalf("gaps %+v; want stdout [10, %d)", logs.gaps, out.StdoutStart)
	}
	if !bytes.Equal(logs.stdout.Bytes(), want[out.StdoutStart:]) {
		t.Fatalf("stdout after the gap: %d bytes, want %d", logs.stdout.Len(), len(want)-int(out.StdoutStart))
	}
	if e := logs.end; e == nil || !e.Finished || e.Exit == nil || e.Exit.ExitCode != 0 || e.StdoutOffset != int64(len(want)) || e.StderrOffset != 5 || e.Output == nil || *e.Output != *out {
		t.Fatalf("end %+v", logs.end)
	}

	var one runRead
	one.read(t, openOp(t, sess, protocol.OpRunLogs, protocol.RunLogsArgs{RunID: "run_tiny", Stream: protocol.StreamStdout, StdoutOffset: out.StdoutEnd - 6}), nil)
	if one.stdout.String() != "10000\n" || one.stderr.Len() != 0 || one.end == nil || one.end.StdoutOffset != out.StdoutEnd {
		t.Fatalf("tail of stdout: %q, end %+v", one.stdout.String(), one.end)
	}
	for name, c := range map[string]struct {
		args protocol.RunLogsArgs
		code protocol.Code
	}{
		"unknown run":     {protocol.RunLogsArgs{RunID: "run_nope"}, protocol.CodeNotFound},
		"past the end":    {protocol.RunLogsArgs{RunID: "run_tiny", StdoutOffset: out.StdoutEnd + 1}, protocol.CodeInvalidArgument},
		"unknown stream":  {protocol.RunLogsArgs{RunID: "run_tiny", Stream: "stdin"}, protocol.CodeInvalidArgument},
		"negative offset": {protocol.RunLogsArgs{RunID: "run_tiny", StderrOffset: -1}, protocol.CodeInvalidArgument},
	} {
		var bad runRead
		bad.read(t, openOp(t, sess, protocol.OpRunLogs, c.args), nil)
		if bad.refused == nil || bad.refused.Code != c.code {
			t.Errorf("%s: refused %+v; want %s", name, bad.refused, c.code)
		}
	}
}

// A TTY run: `tty` names a pseudo-terminal, `stty size` follows a resize, a ^C byte reaches the
// command as SIGINT, its exit status passes through, output with no newline at its end arrives
// whole, and run_signal reaches the command — unconfined, as the agent uid, and in a namespace
// sandbox, whose init relays a terminal of the sandbox's own devpts.
func TestExecTTY(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		_, sess := pipeRunner(t)
		testTTY(t, sess, strconv.Itoa(os.Geteuid()))
	})
	t.Run("uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("isolation uid needs root")
		}
		r, sess := pipeRunner(t)
		root := agentDir(t, 65532)
		r.cfg.Root, r.root = root, root
		r.policy = confine.Policy{Mode: protocol.IsolationUID, UID: 65532, GID: 65532}
		testTTY(t, sess, "65532")
	})
	t.Run("namespaces", func(t *testing.T) {
		r, sess := pipeRunner(t)
		r.policy = namespacesPolicy(t, r)
		testTTY(t, sess, "1000")
	})
}

// agentDir is a fresh directory owned by uid (a test's temporary directories are root's alone,
// unreachable for the agent).
func agentDir(t *testing.T, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tether-tty-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// namespacesPolicy confines r's commands in namespace sandboxes (the test binary is the init, see
// TestMain), the agent mapped to host uid 65532 when the test runs as root. It skips where the
// kernel refuses the namespaces.
func namespacesPolicy(t *testing.T, r *Runner) confine.Policy {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	uid := os.Getuid()
	p := confine.Policy{Mode: protocol.IsolationNamespaces, Self: self, UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		uid, p.UID, p.GID = 65532, 65532, 65532
	}
	p.Workspace = agentDir(t, uid)
	p.StateDir = t.TempDir()
	for _, d := range []string{"mnt", "tmp", "home"} {
		if err := os.Mkdir(filepath.Join(p.StateDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(p.StateDir, d), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	r.cfg.Root, r.root = p.Workspace, p.Workspace
	proc, err := process.Start(process.Spec{Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: p.Workspace, Confiner: p})
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
		t.Skipf("the kernel refuses namespaces here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := proc.Wait(t.Context()); err != nil || exit.Code != 0 {
		t.Fatalf("a confined `true`: %+v %v", exit, err)
	}
	return p
}

func testTTY(t *testing.T, sess *yamux.Session, uid string) {
	script := `id -u; tty; stty size; read x; stty size; trap 'echo got-int; printf no-newline-end; exit 7' INT; echo ready; while :; do sleep 0.05; done`
	st := openOp(t, sess, protocol.OpExec, protocol.ExecArgs{RunID: "run_tty", Stdin: true, TTY: &protocol.WinSize{Rows: 24, Cols: 80},
		Argv: []string{"sh", "-c", script}})
	cw := protocol.NewChannelWriter(st)
	var rr runRead
	rr.read(t, st, func() bool { return strings.Contains(rr.stdout.String(), "24 80") })
	if rr.started == nil || !rr.started.TTY || !strings.HasPrefix(rr.stdout.String(), uid+"\r\n/dev/pts/") {
		t.Fatalf("started %+v, output %q", rr.started, rr.stdout.String())
	}
	if err := cw.WriteJSONFrame(protocol.ChanControl, protocol.ExecControl{Resize: &protocol.WinSize{Rows: 40, Cols: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := cw.WriteFrame(protocol.ChanStdin, []byte("\n")); err != nil {
		t.Fatal(err)
	}
	rr.read(t, st, func() bool { return strings.Contains(rr.stdout.String(), "ready") })
	// The newline typed was echoed once, by the command's terminal alone.
	if !strings.Contains(rr.stdout.String(), "24 80\r\n\r\n40 100\r\n") {
		t.Fatalf("no echo then resized size in %q", rr.stdout.String())
	}
	if err := cw.WriteFrame(protocol.ChanStdin, []byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	rr.read(t, st, nil)
	if rr.exit == nil || rr.exit.ExitCode != 7 || !strings.Contains(rr.stdout.String(), "got-int") || rr.stderr.Len() != 0 {
		t.Fatalf("exit %+v, output %q, stderr %q", rr.exit, rr.stdout.String(), rr.stderr.String())
	}
	if !strings.HasSuffix(rr.stdout.String(), "got-int\r\nno-newline-end") {
		t.Fatalf("the output's end was cut: %q", tail(rr.stdout.String()))
	}

	// run_signal reaches a TTY command, which has a session of its own.
	term := openOp(t, sess, protocol.OpExec, protocol.ExecArgs{RunID: "run_tty_term", TTY: &protocol.WinSize{Rows: 24, Cols: 80},
		Argv: []string{"sh", "-c", `trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done`}})
	var tr runRead
	tr.read(t, term, func() bool { return strings.Contains(tr.stdout.String(), "ready") })
	if res := op(t, sess, protocol.OpRunSignal, 0, protocol.RunSignalArgs{RunID: "run_tty_term", Signal: int(syscall.SIGTERM)}); !res.OK {
		t.Fatalf("run_signal: %+v", res.Error)
	}
	tr.read(t, term, nil)
	if tr.exit == nil || tr.exit.ExitCode != 9 || !strings.Contains(tr.stdout.String(), "got-term") {
		t.Fatalf("after TERM: exit %+v, output %q", tr.exit, tr.stdout.String())
	}
}

// A detached exec answers ChanStarted with the run id and ends its stream; the run's exit is
// then reported to the controller, with its output's range.
func TestDetachReportsExit(t *testing.T) {
	r, runnerSide, ctlSide := memRunner(t)
	r.setSession(runnerSide)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.serve(ctx, runnerSide) }()
	st := openOp(t, ctlSide, protocol.OpExec, protocol.ExecArgs{RunID: "run_det", Detach: true, Argv: []string{"sh", "-c", "echo hi; exit 3"}})
	ch, p, err := protocol.ReadFrame(st, nil)
	if err != nil || ch != protocol.ChanStarted {
		t.Fatalf("first frame %d %v", ch, err)
	}
	var started protocol.ExecStarted
	mustJSON(t, p, &started)
	if started.RunID != "run_det" || started.PID == 0 {
		t.Fatalf("started %+v", started)
	}
	if _, _, err := protocol.ReadFrame(st, nil); err == nil {
		t.Fatal("the detached exec's stream went on")
	}
	rep := accept(t, ctlSide)
	defer rep.Close()
	var h protocol.Header
	var got protocol.RunStatus
	if err := protocol.ReadJSON(rep, &h); err != nil || h.Op != protocol.OpRunExited {
		t.Fatalf("report header %+v %v", h, err)
	}
	mustJSON(t, h.Args, &got)
	if got.RunID != "run_det" || !got.Finished || got.Exit.ExitCode != 3 || got.Output == nil || got.Output.StdoutEnd != 3 {
		t.Fatalf("report %+v output %+v", got, got.Output)
	}
	if err := protocol.WriteJSON(rep, protocol.Trailer{OK: true}); err != nil {
		t.Fatal(err)
	}
}

// run_signal reaches a running run's process group; a finished run is a conflict, an unknown one
// not found, a signal that does not exist invalid.
func TestRunSignal(t *testing.T) {
	r, sess := pipeRunner(t)
	st := openOp(t, sess, protocol.OpExec, protocol.ExecArgs{RunID: "run_sig", Detach: true, Argv: []string{"sh", "-c", "sleep 100 & wait"}})
	var started runRead
	started.read(t, st, func() bool { return started.started != nil })
	for sig, code := range map[int]protocol.Code{0: protocol.CodeInvalidArgument, 65: protocol.CodeInvalidArgument} {
		if tr := op(t, sess, protocol.OpRunSignal, 0, protocol.RunSignalArgs{RunID: "run_sig", Signal: sig}); tr.OK || tr.Error.Code != code {
			t.Errorf("signal %d: %+v", sig, tr.Error)
		}
	}
	if tr := op(t, sess, protocol.OpRunSignal, 0, protocol.RunSignalArgs{RunID: "run_nope", Signal: 15}); tr.OK || tr.Error.Code != protocol.CodeNotFound {
		t.Errorf("unknown run: %+v", tr.Error)
	}
	tr := op(t, sess, protocol.OpRunSignal, 0, protocol.RunSignalArgs{RunID: "run_sig", Signal: int(syscall.SIGTERM)})
	var st1 protocol.RunStatus
	if !tr.OK || json.Unmarshal(tr.Result, &st1) != nil || !st1.Running {
		t.Fatalf("signal: %+v %s", tr.Error, tr.Result)
	}
	if status := waitEnded(t, r, "run_sig"); status.Exit.Signal != int(syscall.SIGTERM) {
		t.Fatalf("exit %+v", status.Exit)
	}
	if tr := op(t, sess, protocol.OpRunSignal, 0, protocol.RunSignalArgs{RunID: "run_sig", Signal: 15}); tr.OK || tr.Error.Code != protocol.CodeConflict {
		t.Errorf("finished run: %+v", tr.Error)
	}
}
