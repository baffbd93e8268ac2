package fsguard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSwapRace swaps a directory with symlinks (one absolute, one to "..")
// in a tight loop while other goroutines write, create, link, open and
// remove through it thousands of times. Whatever the interleaving, nothing
// may land outside the root and nothing outside may be read or removed.
func TestSwapRace(t *testing.T) {
	// CVE-2018-15664 (docker cp) was a race of exactly this shape; ten thousand attempts per
	// resolver give it every chance to show.
	iters := 10000
	if testing.Short() {
		iters = 300
	}
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		must(t, os.Mkdir(filepath.Join(f.dir, "d"), 0o755))
		must(t, os.Symlink(f.outside, filepath.Join(f.dir, "s1")))
		must(t, os.Symlink("..", filepath.Join(f.dir, "s2")))

		ctx, cancel := context.WithCancel(context.Background())
		var swaps atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			d := filepath.Join(f.dir, "d")
			for ctx.Err() == nil {
				for i, link := range []string{"s1", "s1", "s2", "s2"} {
					// Exchange is atomic: "d" is always either the real
					// directory or a symlink, never missing. Swapping back
					// at once keeps "d" a directory about half the time,
					// so operations get far enough to meet a swap mid-way.
					l := filepath.Join(f.dir, link)
					if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, l, unix.RENAME_EXCHANGE); err != nil {
						t.Errorf("exchange: %v", err)
						return
					}
					swaps.Add(1)
					if i%2 == 1 {
						time.Sleep(20 * time.Microsecond)
					}
				}
			}
		})

		var landed, refused atomic.Int64
		var workers sync.WaitGroup
		for w := range 4 {
			workers.Go(func() {
				for i := range iters / 4 {
					name := fmt.Sprintf("d/w%d-%d", w, i)
					var err error
					switch i % 5 {
					case 0, 1:
						_, err = f.root.WriteFile(ctx, name, strings.NewReader("pwned"), 0o644, WriteOptions{})
					case 2:
						err = f.root.MkdirAll(name+"/sub", 0o755)
					case 3:
						err = f.root.Symlink("target", name)
					case 4:
						var fh *os.File
						if fh, err = f.root.Open("d/file"); err == nil {
							fh.Close()
							t.Errorf("opened d/file, which exists only outside")
						}
						f.root.Remove("d/file")
					}
					if err == nil {
						landed.Add(1)
					} else if c := CodeOf(err); c == CodeSymlinkRefused || c == CodeNotFound || c == CodeNotDirectory {
						refused.Add(1)
					} else if i%5 != 4 {
						t.Errorf("%s: unexpected error %v", name, err)
					}
				}
			})
		}
		workers.Wait()
		cancel()
		wg.Wait()
		t.Logf("%d swaps, %d operations landed inside, %d refused", swaps.Load(), landed.Load(), refused.Load())
		if landed.Load() == 0 || refused.Load() == 0 {
			t.Fatalf("race not exercised: %d landed, %d refused", landed.Load(), refused.Load())
		}
		f.assertOutsideUntouched(t)
	})
}
