package forward

import (
	"testing"
	"time"
)

// Guards against: the bandwidth budget going with the workspace's last connection, so the next
// one starts with a full bucket and one connection at a time, reopened, is never paced.
func TestBudgetSurvivesReconnecting(t *testing.T) {
	const bps = 64 << 10
	l := NewLimiter(Limits{BytesPerSecond: bps})
	now := time.Now() // one instant for every take: nothing refills between them
	g, err := l.Acquire("ws")
	if err != nil {
		t.Fatal(err)
	}
	if !g.bytes.AllowN(now, bps) {
		t.Fatal("a fresh workspace's bucket is not full")
	}
	g.Release()
	g2, err := l.Acquire("ws")
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release()
	if g2.bytes.AllowN(now, bps) {
		t.Fatal("the next connection got a full bucket back: reconnecting escapes the budget")
	}
}
