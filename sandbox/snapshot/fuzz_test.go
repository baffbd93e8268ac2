package snapshot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzRestore: whatever the bytes, Restore never writes outside the
// root, never changes what was there, leaves no staging or temporary
// files, and succeeds exactly when ReadManifest accepts the archive (and
// then with the same manifest). Seeds are in testdata/fuzz/FuzzRestore;
// the hostile archives of hostile_test.go are added too.
func FuzzRestore(f *testing.F) {
	for _, tc := range hostileCases() {
		f.Add(tc.data(f))
	}
	f.Add(buildArchive(f, []hent{hdir("a"), hfile("a/f", "hello"), hlink("a/l", "f")}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := newHostileEnv(t, false)
		before := noDirTimes(describe(t, e.base, true, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := Restore(ctx, openRoot(t, e.root), bytes.NewReader(data), RestoreOptions{Dir: "restored", MaxEntries: 1000, MaxBytes: 1 << 20})
		rm, rerr := ReadManifest(ctx, bytes.NewReader(data))
		after := noDirTimes(describe(t, e.base, true, nil))
		noLeftoversBut(t, e.base, archivedAt(m, filepath.Join(e.root, "restored")))
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("restore changed %s: %q -> %q (err %v)", k, v, after[k], err)
			}
		}
		if err != nil {
			if d := diffMaps(before, after); d != "" {
				t.Fatalf("failed restore (%v) changed the tree:\n%s", err, d)
			}
			if rerr == nil && m == nil && !isLimit(err) {
				t.Fatalf("Restore failed (%v) but ReadManifest accepted the archive", err)
			}
			return
		}
		if rerr != nil {
			t.Fatalf("Restore succeeded but ReadManifest failed: %v", rerr)
		}
		if rm.SHA256 != m.SHA256 {
			t.Fatalf("manifests differ: %s vs %s", rm.SHA256, m.SHA256)
		}
		for k := range after {
			if _, ok := before[k]; !ok && k != "root/restored" && !strings.HasPrefix(k, "root/restored/") {
				t.Fatalf("restore created %s outside its target", k)
			}
		}
		os.RemoveAll(filepath.Join(e.root, "restored"))
	})
}

func isLimit(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Code == CodeTooLarge
}
