package runner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// The runner serves exactly the controller→runner operations of the protocol's list, each with
// the arguments the list names: an operation listed but not served, or served but not listed (or
// listed the other way round), fails here.
func TestHandlersMatchProtocolOps(t *testing.T) {
	for _, s := range protocol.Ops() {
		if s.Direction != protocol.ControllerToRunner {
			continue
		}
		h, ok := handlers[s.Name]
		if !ok {
			t.Errorf("%s is a controller→runner operation the runner has no handler for", s.Name)
			continue
		}
		if h.args != s.Args {
			t.Errorf("%s: the handler takes arguments %v; the protocol lists %v", s.Name, h.args, s.Args)
		}
	}
	for name := range handlers {
		if s, ok := protocol.LookupOp(name); !ok || s.Direction != protocol.ControllerToRunner {
			t.Errorf("the runner serves %q, which is not a controller→runner operation of the protocol (%+v)", name, s)
		}
	}
}

// Arguments that do not decode are refused the way the operation answers: a trailer, or for exec
// its exit frame; an operation no handler serves is unsupported.
func TestHandlerRefusals(t *testing.T) {
	_, sess := pipeRunner(t)
	bad := json.RawMessage(`{"path": 5}`)
	tr := op(t, sess, protocol.OpFsStat, 0, bad)
	if tr.OK || tr.Error.Code != protocol.CodeInvalidArgument || !strings.HasPrefix(tr.Error.Message, "fs_stat arguments: ") {
		t.Errorf("fs_stat with bad arguments: %+v", tr.Error)
	}
	if tr := op(t, sess, protocol.OpFsRead, 0, bad); tr.OK || tr.Error.Code != protocol.CodeInvalidArgument {
		t.Errorf("fs_read with bad arguments: %+v", tr.Error)
	}
	if tr := op(t, sess, protocol.OpRunExited, 0, struct{}{}); tr.OK || tr.Error.Code != protocol.CodeUnsupported {
		t.Errorf("a runner→controller operation sent to the runner: %+v", tr.Error)
	}
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpExec, Args: json.RawMessage(`{"argv": "ls"}`)}); err != nil {
		t.Fatal(err)
	}
	ch, p, err := protocol.ReadFrame(st, nil)
	if err != nil || ch != protocol.ChanExit {
		t.Fatalf("exec with bad arguments: channel %d, %v", ch, err)
	}
	var exit protocol.ExecExit
	if err := json.Unmarshal(p, &exit); err != nil || exit.ExitCode != -1 || exit.Error == nil || exit.Error.Code != protocol.CodeInvalidArgument {
		t.Fatalf("exec with bad arguments: %+v, %v", exit, err)
	}
}
