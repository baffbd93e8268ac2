package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/protocol"
)

// TestCreateTokenNameRace: of 20 tokens created at once under one name, one is recorded; the
// others are refused with exists (on PostgreSQL, those that passed the name check meanwhile by
// the live-name index).
func TestCreateTokenNameRace(t *testing.T) {
	eachDriver(t, "pool_max_conns=32", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		var created atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 20 {
			wg.Go(func() {
				<-start
				err := s.CreateToken(ctx, store.Token{Name: "ci", Hash: fmt.Sprintf("hash-%d", i), CreatedAt: time.Now()})
				if err == nil {
					created.Add(1)
				} else if protocol.CodeOf(err) != protocol.CodeExists {
					t.Errorf("refused create: %v; want exists", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := created.Load(); n != 1 {
			t.Fatalf("%d tokens named ci created; want 1", n)
		}
	})
}
