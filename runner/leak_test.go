package runner

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/sandbox/confine"
)

// The test binary is its own sandbox init, as the runner binary is in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == confine.InitArg {
		os.Exit(confine.Init(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}
