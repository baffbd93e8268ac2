package controller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// TestShutdownDrains: a controller told to stop (Serve's context ends, as on SIGTERM) disowns
// its runner at once, so that the runner is admitted elsewhere without waiting out this
// controller's heartbeat, but finishes the operation it has in flight on it (here a stat whose
// answer the runner holds back) before it closes the runner's connection.
func TestShutdownDrains(t *testing.T) {
	s, err := New(context.Background(), Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, l) }()
	tc := &testController{s: s, url: "http://" + l.Addr().String()}

	al, sess, _ := tc.connectRunner(t, "drain")
	if err := s.store.TransitionWorkspace(context.Background(), al.workspaceID, wsstate.FinishProvision, "", ""); err != nil {
		t.Fatal(err)
	}
	// The runner answers the one operation it is asked only when told to.
	asked, answer := make(chan struct{}), make(chan struct{})
	go func() {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		defer st.Close()
		var h protocol.Header
		if protocol.ReadJSON(st, &h) != nil {
			return
		}
		close(asked)
		<-answer
		b, _ := json.Marshal(protocol.FileInfo{Path: "f", Name: "f", Type: protocol.FileRegular, Size: 3})
		_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: b})
	}()
	stat := make(chan error, 1)
	go func() {
		_, err := tc.apiClient(t, s.OperatorToken()).StatFile(context.Background(), al.workspaceID, "f")
		stat <- err
	}()
	select {
	case <-asked:
	case <-time.After(guard):
		t.Fatal("the stat did not reach the runner")
	}

	stop()
	eventually(t, "the runner disowned", func() bool {
		a := tc.allocState(t, al.allocationID)
		return a.State == store.AllocDisconnected && a.Owner == ""
	})
	if sess.IsClosed() {
		t.Fatal("the runner's connection closed with an operation in flight")
	}
	close(answer)
	if err := <-stat; err != nil {
		t.Fatalf("the stat in flight at shutdown: %v", err)
	}
	waitClosed(t, "the runner's connection after the drain", sess)
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestExecStartsOnTheRunnersNextConnection: an exec whose runner connection ends after the
// request reached the runner but before the run was sent (in a rolling restart, the owner
// drains and closes the connections with no stream open, and this run had none yet) starts the
// run on the runner's next connection: nothing ran, and a failure after the upgrade is one the
// client cannot retry.
func TestExecStartsOnTheRunnersNextConnection(t *testing.T) {
	tc := newTestController(t)
	al := tc.addAllocation(t, "exec-next")
	first, w := tc.connectOnce(t, al, al.token, true)
	if err := tc.s.store.TransitionWorkspace(context.Background(), al.workspaceID, wsstate.FinishProvision, "", ""); err != nil {
		t.Fatal(err)
	}
	// The exec's websocket is open, so its runner was reached; its arguments are not sent yet.
	u := "ws" + strings.TrimPrefix(tc.url, "http") + "/v1/workspaces/" + al.workspaceID + "/exec"
	conn, _, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {protocol.Bearer(tc.s.OperatorToken())}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(guard))
	tc.closeConn(t, al, first)
	next, _ := tc.connectOnce(t, al, w.SessionToken, true)
	ops := make(chan string, 1)
	go func() {
		st, err := next.AcceptStream()
		if err != nil {
			return
		}
		defer st.Close()
		var h protocol.Header
		if protocol.ReadJSON(st, &h) != nil {
			return
		}
		ops <- h.Op
		_ = protocol.NewChannelWriter(st).WriteJSONFrame(protocol.ChanExit, protocol.ExecExit{ExitCode: 7})
	}()

	args, _ := json.Marshal(protocol.ExecArgs{Argv: []string{"true"}})
	if err := conn.WriteMessage(websocket.BinaryMessage, args); err != nil {
		t.Fatal(err)
	}
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("exec ended without an exit: %v", err)
		}
		if len(msg) == 0 {
			continue
		}
		switch protocol.Channel(msg[0]) {
		case protocol.ChanError:
			t.Fatalf("exec failed: %s", msg[1:])
		case protocol.ChanExit:
			var exit protocol.ExecExit
			if err := json.Unmarshal(msg[1:], &exit); err != nil || exit.ExitCode != 7 {
				t.Fatalf("exit %s (%v); want the runner's exit 7", msg[1:], err)
			}
			if op := <-ops; op != protocol.OpExec {
				t.Fatalf("the runner's next connection was asked %q", op)
			}
			return
		}
	}
}
