package hub

import (
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// A runner's refusal of a dial reaches clients only with the codes a dial can have: a hostile
// runner cannot make a preview page or the proxy say unauthorized or revoked.
func TestDialRefusalKeepsToDialCodes(t *testing.T) {
	for _, c := range []struct {
		in, want protocol.Code
	}{
		{protocol.CodeUnavailable, protocol.CodeUnavailable},
		{protocol.CodeInvalidArgument, protocol.CodeInvalidArgument},
		{protocol.CodeUnauthorized, protocol.CodeUnavailable},
		{protocol.CodeRevoked, protocol.CodeUnavailable},
		{protocol.CodeInternal, protocol.CodeUnavailable},
	} {
		if got := protocol.CodeOf(dialRefusal(protocol.Errorf(c.in, "from the runner"))); got != c.want {
			t.Errorf("runner says %s: clients get %s, want %s", c.in, got, c.want)
		}
	}
	if dialRefusal(nil) != nil {
		t.Error("no refusal became one")
	}
}
