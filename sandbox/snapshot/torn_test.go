package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/sandbox/stableread/stablereadtest"
)

// TestCaptureWhileRewrittenInPlace races captures against a writer that rewrites a 4 MiB file in
// place (same size, one pwrite over the whole file per generation). Every capture must either
// fail with changed_during_capture or archive one whole version. A stat before and after the read
// cannot tell: write(2) stamps the times before it copies the data, so a write already under way
// at the first stat tears the read and leaves both stats equal. Without stableread's check, tens
// of these captures archive a torn mix.
func TestCaptureWhileRewrittenInPlace(t *testing.T) {
	const size = 4 << 20
	captures := 200
	if testing.Short() {
		captures = 40
	}
	for _, mode := range []struct {
		name     string
		keepOpen bool
	}{{"writer keeps the file open", true}, {"writer reopens for each write", false}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "a.txt"), "before", 0o644)
			writeFile(t, filepath.Join(dir, "z.txt"), "after", 0o644)
			rw := stablereadtest.Start(t, filepath.Join(dir, "hot.bin"), size, mode.keepOpen)
			root := openRoot(t, dir)
			var whole, refused int
			buf := new(bytes.Buffer)
			for i := range captures {
				buf.Reset()
				m, err := Capture(context.Background(), root, buf, CaptureOptions{Concurrency: 1})
				if err != nil {
					var e *Error
					if !errors.As(err, &e) || e.Code != CodeChangedDuringCapture || e.Path != "hot.bin" {
						t.Fatalf("capture %d failed with an unexpected error: %v", i, err)
					}
					refused++
					continue
				}
				got := archivedFile(t, buf.Bytes(), "hot.bin")
				if torn := rw.Torn(got); torn != "" {
					t.Errorf("capture %d archived %s as consistent (manifest says %d bytes)", i, torn, m.Totals.Bytes)
					continue
				}
				whole++
			}
			gens, err := rw.Stop()
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			t.Logf("%d captures archived a whole version, %d were refused, while the writer made %d generations", whole, refused, gens)
			// At rest, the file is captured again (a second read confirms it, being just changed).
			buf.Reset()
			if _, err := Capture(context.Background(), root, buf, CaptureOptions{}); err != nil {
				t.Fatalf("capture after the writer stopped: %v", err)
			}
			if torn := rw.Torn(archivedFile(t, buf.Bytes(), "hot.bin")); torn != "" {
				t.Fatalf("capture after the writer stopped archived %s", torn)
			}
		})
	}
}

// archivedFile returns the content of the entry name in a captured archive.
func archivedFile(t testing.TB, data []byte, name string) []byte {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data))
	must(t, err)
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s is not in the archive", name)
		}
		must(t, err)
		if h.Name == name {
			b, err := io.ReadAll(tr)
			must(t, err)
			return b
		}
	}
}
