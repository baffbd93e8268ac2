package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// A detached run's exit report that the controller fails to record is sent again on the same
// connection (nothing else would settle the run before a reconnect); one it refuses is not.
func TestReportRunExitRetries(t *testing.T) {
	for name, answers := range map[string][]protocol.Trailer{
		"busy, then recorded": {{Error: protocol.Errorf(protocol.CodeInternal, "database is locked")}, {OK: true}},
		"refused":             {{Error: protocol.Errorf(protocol.CodeNotFound, "run %q not found", "run_1")}},
	} {
		t.Run(name, func(t *testing.T) {
			r, runnerSide, ctlSide := memRunner(t)
			r.setSession(runnerSide)
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.reportRunExit(protocol.RunStatus{RunID: "run_1", Finished: true, Exit: protocol.ExecExit{ExitCode: 7}})
			}()
			for i, answer := range answers {
				st := accept(t, ctlSide)
				var h protocol.Header
				var got protocol.RunStatus
				if err := protocol.ReadJSON(st, &h); err != nil || h.Op != protocol.OpRunExited || json.Unmarshal(h.Args, &got) != nil ||
					got.RunID != "run_1" || !got.Finished || got.Exit.ExitCode != 7 {
					t.Fatalf("report %d: %+v %+v %v", i+1, h, got, err)
				}
				if err := protocol.WriteJSON(st, answer); err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the report went on after its last answer")
			}
		})
	}
}

func accept(t *testing.T, sess *yamux.Session) *yamux.Stream {
	t.Helper()
	accepted := make(chan *yamux.Stream, 1)
	go func() {
		if st, err := sess.AcceptStream(); err == nil {
			accepted <- st
		}
	}()
	select {
	case st := <-accepted:
		return st
	case <-time.After(30 * time.Second):
		t.Fatal("no report came")
		return nil
	}
}
