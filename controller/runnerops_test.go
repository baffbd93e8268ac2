package controller

import (
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// The controller serves exactly the runner→controller operations of the protocol's list: OpHello
// on the first stream (acceptHello), every other one through runnerOps. An operation listed but
// not served, or served but not listed, fails here.
func TestRunnerOpsMatchProtocolOps(t *testing.T) {
	served := map[string]bool{protocol.OpHello: true}
	for name := range runnerOps {
		served[name] = true
	}
	for _, s := range protocol.Ops() {
		if s.Direction == protocol.RunnerToController && !served[s.Name] {
			t.Errorf("%s is a runner→controller operation the controller does not serve", s.Name)
		}
	}
	for name := range served {
		if s, ok := protocol.LookupOp(name); !ok || s.Direction != protocol.RunnerToController {
			t.Errorf("the controller serves %q, which is not a runner→controller operation of the protocol (%+v)", name, s)
		}
	}
	if _, ok := runnerOps[protocol.OpHello]; ok {
		t.Errorf("%s is served after the hello was accepted", protocol.OpHello)
	}
}
