package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/sandbox/stableread"
	"github.com/tetherhq/tether/sandbox/stableread/stablereadtest"
)

// TestWriteWhileRewrittenInPlace races source imports against a writer that rewrites a 4 MiB
// file in place (same size, one pwrite over the whole file per generation). Every import must
// either fail with changed_during_capture or carry one whole version. Size and mtime before and
// after cannot tell: write(2) stamps the times before it copies the data, so a write already under
// way when the file is opened tears the read and leaves both stats equal.
func TestWriteWhileRewrittenInPlace(t *testing.T) {
	const size = 4 << 20
	imports := 200
	if testing.Short() {
		imports = 40
	}
	for _, mode := range []struct {
		name     string
		keepOpen bool
	}{{"writer keeps the file open", true}, {"writer reopens for each write", false}} {
		t.Run(mode.name, func(t *testing.T) {
			src := t.TempDir()
			hot := filepath.Join(src, "hot.bin")
			rw := stablereadtest.Start(t, hot, size, mode.keepOpen)
			var whole, refused int
			// One buffer for all: growing a fresh one each time is most of the cost under -race.
			buf := bytes.NewBuffer(make([]byte, 0, size+1<<20))
			for i := range imports {
				buf.Reset()
				err := Write(context.Background(), buf, src, WriteOptions{})
				if err != nil {
					var e *stableread.Error
					if !errors.As(err, &e) || e.ErrorCode() != "changed_during_capture" || e.Path != hot {
						t.Fatalf("import %d failed with an unexpected error: %v", i, err)
					}
					refused++
					continue
				}
				if torn := rw.Torn(tarFile(t, buf.Bytes(), "hot.bin")); torn != "" {
					t.Errorf("import %d carried %s", i, torn)
					continue
				}
				whole++
			}
			gens, err := rw.Stop()
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			t.Logf("%d imports carried a whole version, %d were refused, while the writer made %d generations", whole, refused, gens)
			buf.Reset()
			must(t, Write(context.Background(), buf, src, WriteOptions{}))
			if torn := rw.Torn(tarFile(t, buf.Bytes(), "hot.bin")); torn != "" {
				t.Fatalf("import after the writer stopped carried %s", torn)
			}
		})
	}
}

// tarFile returns the content of the entry name in a tar stream.
func tarFile(t testing.TB, data []byte, name string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s is not in the stream", name)
		}
		must(t, err)
		if h.Name == name {
			b, err := io.ReadAll(tr)
			must(t, err)
			return b
		}
	}
}
