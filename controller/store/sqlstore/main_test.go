package sqlstore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// TestMain stops the PostgreSQL server pgtest started for the tests, if any, then looks for
// goroutines left running.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	// Every store's goroutines (the PostgreSQL listener, watches) end with its Close.
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "goroutines left running: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// freshPostgres is an empty database for t on the test server (see pgtest.Database), in the
// shape of a driver's fresh function.
func freshPostgres(t *testing.T, extra string) string {
	t.Helper()
	return pgtest.Database(t, extra)
}
