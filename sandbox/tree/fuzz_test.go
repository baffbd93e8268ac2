package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

func fuzzSeeds(t testing.TB) [][]byte {
	plain := [][]byte{
		buildTar(t, dir("a/"), file("a/f", "hello"), symlink("a/l", "f")),
		buildTar(t, file("../evil", "x")),
		buildTar(t, file("/abs", "x")),
		buildTar(t, symlink("l", "../outside"), file("l/pwned", "x")),
		buildTar(t, symlink("out2", "/"), dir("out2/etc/")),
		buildTar(t, file("f", "x"), entry{name: "h", link: "f", typ: tar.TypeLink}),
		buildTar(t, file("existing.txt", "theirs")),
		buildTar(t, file("out/secret", "x")),
		buildTar(t, entry{name: "ro/", typ: tar.TypeDir, mode: 0o500}, file("ro/x", "y")),
	}
	seeds := append([][]byte{}, plain...)
	for _, p := range plain {
		seeds = append(seeds, zstdBytes(t, p))
	}
	return append(seeds, nil, zstdMagic)
}

// FuzzExtract: whatever the bytes, Extract never creates, changes or
// removes anything outside the root, and it either succeeds without
// touching what was there or fails leaving the target exactly unchanged.
func FuzzExtract(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res := fsguard.ResolverOpenat2
		if len(data)%2 == 1 {
			res = fsguard.ResolverWalk
		}
		e := newEnv(t, res)
		before := snapshot(t, e.dir, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := Extract(ctx, e.root, bytes.NewReader(data), ExtractOptions{MaxBytes: 1 << 20})
		e.assertOutsideUntouched(t)
		after := snapshot(t, e.dir, true)
		if err != nil {
			if d := diff(before, after); d != "" {
				t.Fatalf("failed extract (%v) changed the target:\n%s", err, d)
			}
			return
		}
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("extract changed existing %s: %q -> %q", k, v, after[k])
			}
		}
		for k := range after {
			base := filepath.Base(k)
			if strings.HasPrefix(base, StagePrefix) || strings.HasPrefix(base, fsguard.TempPrefix) {
				t.Fatalf("leftover %s", k)
			}
		}
	})
}
