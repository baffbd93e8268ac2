package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/sandbox/confine"
)

// A runner asked for an isolation it does not know refuses to serve: taking a misspelt mode
// for "none" would run the agent unconfined without anyone having asked.
func TestUnknownIsolationRefused(t *testing.T) {
	r, err := New(Config{ControllerURL: "http://127.0.0.1:1", Token: "t", AllocationID: "a", Root: t.TempDir(),
		Confine: confine.Policy{Mode: "namespace"}})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `unknown isolation "namespace"`) {
		t.Fatalf("Run with isolation %q: %v", "namespace", err)
	}
}
