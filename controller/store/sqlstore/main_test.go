package sqlstore_test

import (
	"os"
	"testing"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// TestMain stops the PostgreSQL server pgtest started for the tests, if any, and fails when a
// store left goroutines running: every store's (the PostgreSQL listener, watches) end with its
// Close.
func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }

// freshPostgres is an empty database for t on the test server (see pgtest.Database), in the
// shape of a driver's fresh function.
func freshPostgres(t *testing.T, extra string) string {
	t.Helper()
	return pgtest.Database(t, extra)
}
