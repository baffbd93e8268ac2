package tree

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/staging"
)

// TestPublishRollsBack drives a publish that fails after some top-level
// entries were already moved: they must be moved back and the staging
// directory removed, so the target ends as it began.
func TestPublishRollsBack(t *testing.T) {
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		e := newEnv(t, res)
		before := snapshot(t, e.dir, true)
		st, err := newStage(e.root)
		must(t, err)
		data := buildTar(t, dir("one/"), file("one/f", "1"), file("two", "2"), dir("three/"))
		_, err = st.fill(context.Background(), bytes.NewReader(data), 0)
		must(t, err)
		// Metadata for a directory that is not there makes the step after
		// the moves fail.
		st.SetDirMeta("ghost", staging.DirMeta{Mode: 0o755})
		err = st.Publish(context.Background())
		wantCode(t, err, fsguard.CodeNotFound)
		st.Close()
		if d := diff(before, snapshot(t, e.dir, true)); d != "" {
			t.Fatalf("target changed:\n%s", d)
		}
	})
}
