package retention

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// plan runs Plan over receipts made at the given times (snap-0 the first) and renders the
// verdict as "id:rules" for kept and "id:-" for removed, newest first.
func plan(t *testing.T, at []time.Time, p api.RetentionPolicy) string {
	t.Helper()
	var snaps []api.Snapshot
	for i, ts := range at {
		snaps = append(snaps, api.Snapshot{ID: fmt.Sprintf("snap-%d", i), CreatedAt: ts})
	}
	kept, removed := Plan(snaps, p)
	var out []string
	for _, k := range kept {
		out = append(out, k.ID+":"+strings.Join(k.Rules, "+"))
	}
	for _, r := range removed {
		out = append(out, r.ID+":-")
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestPlan(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := []time.Time{
		day.Add(10 * time.Hour),                   // 0: day 1, 10h
		day.Add(10*time.Hour + 30*time.Minute),    // 1: day 1, 10h (newest of its hour)
		day.Add(11 * time.Hour),                   // 2: day 1, 11h (newest of day 1)
		day.Add(24*time.Hour + 9*time.Hour),       // 3: day 2, 9h
		day.Add(24*time.Hour + 9*time.Hour + 1e9), // 4: day 2, 9h, the newest
	}
	for _, tc := range []struct {
		p    api.RetentionPolicy
		want string
	}{
		{api.RetentionPolicy{}, "snap-0:no policy snap-1:no policy snap-2:no policy snap-3:no policy snap-4:newest"},
		{api.RetentionPolicy{KeepLast: 1}, "snap-0:- snap-1:- snap-2:- snap-3:- snap-4:newest+last"},
		{api.RetentionPolicy{KeepLast: 2}, "snap-0:- snap-1:- snap-2:- snap-3:last snap-4:newest+last"},
		{api.RetentionPolicy{KeepHourly: 2}, "snap-0:- snap-1:- snap-2:hourly snap-3:- snap-4:newest+hourly"},
		{api.RetentionPolicy{KeepHourly: 3}, "snap-0:- snap-1:hourly snap-2:hourly snap-3:- snap-4:newest+hourly"},
		{api.RetentionPolicy{KeepDaily: 5}, "snap-0:- snap-1:- snap-2:daily snap-3:- snap-4:newest+daily"},
		{api.RetentionPolicy{KeepLast: 1, KeepDaily: 2}, "snap-0:- snap-1:- snap-2:daily snap-3:- snap-4:newest+last+daily"},
	} {
		if got := plan(t, at, tc.p); got != tc.want {
			t.Errorf("Plan(%+v):\n got  %s\n want %s", tc.p, got, tc.want)
		}
	}
	// Receipts in any order, two in one instant: the store's order (created_at, id) decides.
	same := []time.Time{day, day, day.Add(-time.Hour)}
	if got, want := plan(t, same, api.RetentionPolicy{KeepLast: 1}), "snap-0:- snap-1:newest+last snap-2:-"; got != want {
		t.Errorf("ties: got %s, want %s", got, want)
	}
	if kept, removed := Plan(nil, api.RetentionPolicy{KeepLast: 1}); kept != nil || removed != nil {
		t.Errorf("no receipts: kept %v removed %v", kept, removed)
	}
	if err := Check(api.RetentionPolicy{KeepDaily: -1}); err == nil {
		t.Error("a negative count is accepted")
	}
}
