package controller

import (
	"os"
	"testing"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// TestMain stops the PostgreSQL server the cluster tests started, if any, and fails when a test
// left goroutines running.
func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }
