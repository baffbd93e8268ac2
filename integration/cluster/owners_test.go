package cluster

import (
	"context"
	"database/sql"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// The failover tests read who owns each runner from the store itself rather than through the
// API: ownership is the store's record (the allocations' owner column), and a test that read it
// through a controller would only learn what that controller believes.

// Allocation is an allocation's ownership as the store records it.
type Allocation struct {
	ID, State, Owner string
	OwnerSince       time.Time // stamped by the claiming controller's clock (this host's)
}

// allocations reads the ownership of the allocations named by ids (all of them when ids is
// empty), keyed by id.
func allocations(t *testing.T, c *h.Cluster, ids ...string) map[string]Allocation {
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

// byID is the harness's controller whose cluster id is id, or nil.
func byID(t *testing.T, c *h.Cluster, id string) *h.Controller {
	t.Helper()
	for _, ctl := range c.Controllers {
		if ctl.ID(t) == id {
			return ctl
		}
	}
	return nil
}
