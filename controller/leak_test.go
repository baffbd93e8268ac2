package controller

import (
	"fmt"
	"os"
	"testing"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
	"go.uber.org/goleak"
)

// TestMain stops the PostgreSQL server the cluster tests started, if any, and fails when a test
// left goroutines running.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "goroutines left running: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
