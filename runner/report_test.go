package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// A detached run's exit report that the controller fails to record is sent again on the same
// connection: nothing else would settle the run before a reconnect.
func TestReportRunExitRetries(t *testing.T) {
	r, runnerSide, ctlSide := memRunner(t)
	r.setSession(runnerSide)

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.reportRunExit(protocol.RunStatus{RunID: "run_1", Finished: true, Exit: protocol.ExecExit{ExitCode: 7}})
	}()
	answers := []protocol.Trailer{
		{Error: protocol.Errorf(protocol.CodeInternal, "database is locked")},
		{OK: true},
	}
	for i, answer := range answers {
		accepted := make(chan *yamux.Stream, 1)
		go func() {
			if st, err := ctlSide.AcceptStream(); err == nil {
				accepted <- st
			}
		}()
		var st *yamux.Stream
		select {
		case st = <-accepted:
		case <-time.After(30 * time.Second):
			t.Fatalf("report %d never came", i+1)
		}
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
		t.Fatal("the report did not finish after it was acknowledged")
	}
}
