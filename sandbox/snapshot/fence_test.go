package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

var errChanged = &Error{Code: CodeChangedDuringCapture}

// stampNow is the stamp of rel as it is now.
func stampNow(t *testing.T, dir, rel string) stableread.Stamp {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, rel), &st))
	return stableread.FromStat(&st)
}

// A change within one coarse timestamp tick of the read leaves every time equal: the fence must
// then compare content. The marks below carry the stamp as it is after the change, which is what
// such a change looks like; a racy mark must be caught by its content, a settled one is trusted.
func TestFenceComparesRacyEntriesByContent(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d", "f.txt"), "one", 0o644)
	_, m := capture(t, dir)
	// Same size, other bytes; and a new name in d.
	must(t, os.WriteFile(filepath.Join(dir, "d", "f.txt"), []byte("two"), 0o644))
	writeFile(t, filepath.Join(dir, "d", "new.txt"), "", 0o644)
	root := openRoot(t, dir)
	index := map[string]int{}
	for i, e := range m.Entries {
		index[e.Path] = i
	}
	var tried, held int
	for _, rel := range []string{"d/f.txt", "d"} {
		for _, racy := range []bool{true, false} {
			var f fence
			f.add(index[rel], stampNow(t, dir, rel), racy)
			err := f.verify(context.Background(), root, m, make([]byte, 4096))
			tried++
			switch {
			case racy && !errors.Is(err, errChanged):
				t.Errorf("%s, racy: got %v; want changed_during_capture from its content", rel, err)
			case !racy && err != nil:
				t.Errorf("%s, settled: got %v; a settled stamp that did not move is trusted", rel, err)
			default:
				held++
			}
		}
	}
	// And a stamp that moved fails whatever its raciness.
	var f fence
	f.add(index["d/f.txt"], stableread.Stamp{}, false)
	tried++
	if err := f.verify(context.Background(), root, m, nil); !errors.Is(err, errChanged) {
		t.Errorf("moved stamp: got %v; want changed_during_capture", err)
	} else {
		held++
	}
	t.Logf("fence: %d marks tried, %d judged as expected", tried, held)
}
