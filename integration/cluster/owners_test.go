package cluster

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// The failover tests read who owns each runner from the store itself rather than through the
// API: ownership is the store's record (the allocations' owner column), and a test that read it
// through a controller would only learn what that controller believes.

// ID is the controller's cluster id, kept in its data directory across restarts.
func (c *Controller) ID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Data, "controller.id"))
	if err != nil {
		t.Fatalf("controller %s: %v", c.Name, err)
	}
	return strings.TrimSpace(string(b))
}

// Allocation is an allocation's ownership as the store records it.
type Allocation struct {
	ID, State, Owner string
	OwnerSince       time.Time // stamped by the claiming controller's clock (this host's)
}

// DB is a connection to the cluster's PostgreSQL database (through the relay on the bridge,
// which the test process reaches as the nodes do), opened on first use and closed when t ends.
func (c *Cluster) DB(t *testing.T) *sql.DB {
	t.Helper()
	c.dbMu.Lock()
	defer c.dbMu.Unlock()
	if c.db == nil {
		db, err := sql.Open("pgx", c.StoreURL)
		if err != nil {
			t.Fatal(err)
		}
		c.db = db
		t.Cleanup(func() { db.Close() })
	}
	return c.db
}

// Allocations reads the ownership of the allocations named by ids (all of them when ids is
// empty), keyed by id.
func (c *Cluster) Allocations(t *testing.T, ids ...string) map[string]Allocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.DB(t).QueryContext(ctx, `SELECT id, state, owner, owner_since FROM allocations`)
	if err != nil {
		t.Fatalf("read allocation owners: %v", err)
	}
	defer rows.Close()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]Allocation{}
	for rows.Next() {
		var a Allocation
		var since sql.NullTime
		if err := rows.Scan(&a.ID, &a.State, &a.Owner, &since); err != nil {
			t.Fatalf("read allocation owners: %v", err)
		}
		if len(want) > 0 && !want[a.ID] {
			continue
		}
		if since.Valid {
			// The column is a timestamp without time zone holding UTC.
			s := since.Time
			a.OwnerSince = time.Date(s.Year(), s.Month(), s.Day(), s.Hour(), s.Minute(), s.Second(), s.Nanosecond(), time.UTC)
		}
		out[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read allocation owners: %v", err)
	}
	return out
}

// ByID is the harness's controller whose cluster id is id, or nil.
func (c *Cluster) ByID(t *testing.T, id string) *Controller {
	t.Helper()
	for _, ctl := range c.Controllers {
		if ctl.ID(t) == id {
			return ctl
		}
	}
	return nil
}
