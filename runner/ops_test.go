package runner

import (
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
