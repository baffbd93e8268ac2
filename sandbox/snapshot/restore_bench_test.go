package snapshot

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRestoreSmallFiles restores a tree of 4,000 files of 1–8 KiB (the shape of a source
// tree, where file creation dominates). `go test -bench RestoreSmallFiles -run ^$ ./sandbox/snapshot`
func BenchmarkRestoreSmallFiles(b *testing.B) {
	src := b.TempDir()
	for i := range 4000 {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", i%40))
		must(b, os.MkdirAll(dir, 0o755))
		must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.go", i)), make([]byte, 1024*(1+i%8)), 0o644))
	}
	data, _ := capture(b, src)
	b.ResetTimer()
	for i := range b.N {
		dst := b.TempDir()
		if _, err := restoreInto(b, data, dst, fmt.Sprintf("r%d", i)); err != nil {
			b.Fatal(err)
		}
	}
}
