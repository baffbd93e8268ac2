// Package retention decides which of a workspace's receipts a retention policy keeps.
package retention

import (
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// The names of the rules that keep a receipt.
const (
	RuleNewest = "newest"
	RuleLast   = "last"
	RuleHourly = "hourly"
	RuleDaily  = "daily"
)

// Check refuses a policy with a negative count.
func Check(p api.RetentionPolicy) error {
	if p.KeepLast < 0 || p.KeepHourly < 0 || p.KeepDaily < 0 {
		return protocol.Errorf(protocol.CodeInvalidArgument, "retention counts must not be negative (keep-last %d, keep-hourly %d, keep-daily %d)",
			p.KeepLast, p.KeepHourly, p.KeepDaily)
	}
	return nil
}

// Plan splits snaps (any order) into those p keeps, each with the rules that keep it, and those
// it removes, both newest first. Like restic: the newest KeepLast receipts; for the last
// KeepHourly hours (KeepDaily days, UTC) that have a receipt, the newest receipt of each. The
// newest receipt is always kept; an empty policy keeps everything. Reclaimed receipts hold no
// bytes and are history: the caller leaves them out.
func Plan(snaps []api.Snapshot, p api.RetentionPolicy) (kept, removed []api.PruneItem) {
	sorted := slices.Clone(snaps)
	slices.SortFunc(sorted, func(a, b api.Snapshot) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		// The store's order (created_at, id), reversed.
		switch {
		case a.ID > b.ID:
			return -1
		case a.ID < b.ID:
			return 1
		}
		return 0
	})
	rules := make([][]string, len(sorted))
	if len(sorted) > 0 {
		rules[0] = append(rules[0], RuleNewest)
	}
	for i := 0; i < len(sorted) && i < p.KeepLast; i++ {
		rules[i] = append(rules[i], RuleLast)
	}
	bucket := func(n int, rule string, key func(time.Time) string) {
		last := ""
		for i, s := range sorted {
			if n == 0 {
				return
			}
			if k := key(s.CreatedAt.UTC()); k != last {
				last = k
				rules[i] = append(rules[i], rule)
				n--
			}
		}
	}
	bucket(p.KeepHourly, RuleHourly, func(t time.Time) string { return t.Format("2006-01-02T15") })
	bucket(p.KeepDaily, RuleDaily, func(t time.Time) string { return t.Format("2006-01-02") })
	for i, s := range sorted {
		item := api.PruneItem{ID: s.ID, CreatedAt: s.CreatedAt, Bytes: s.Bytes, Rules: rules[i]}
		if p.Empty() && item.Rules == nil {
			item.Rules = []string{"no policy"}
		}
		if item.Rules != nil {
			kept = append(kept, item)
		} else {
			removed = append(removed, item)
		}
	}
	return kept, removed
}

// Describe is a policy in the words of the CLI's flags.
func Describe(p api.RetentionPolicy) string {
	if p.Empty() {
		return "keep everything"
	}
	return fmt.Sprintf("keep-last %d, keep-hourly %d, keep-daily %d", p.KeepLast, p.KeepHourly, p.KeepDaily)
}
