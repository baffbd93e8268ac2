package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// sparseFile makes a file of size bytes holding data only at the given offsets (64 KiB of
// random bytes each, cut at the end of the file); everything else is a hole.
func sparseFile(t testing.TB, p string, size int64, at ...int64) {
	t.Helper()
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	must(t, f.Truncate(size))
	for _, off := range at {
		b := make([]byte, min(64<<10, size-off))
		rand.Read(b)
		_, err := f.WriteAt(b, off)
		must(t, err)
	}
}

func allocated(t testing.TB, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(p, &st))
	return st.Blocks * 512
}

func fileSHA(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// sparseTree is a workspace with sparse files of several shapes and two that must stay plain.
func sparseTree(t testing.TB) (dir string, sparse, plain []string) {
	dir = t.TempDir()
	sparseFile(t, filepath.Join(dir, "disk.img"), 40<<20, 0, 10<<20+123) // ends in a hole
	sparseFile(t, filepath.Join(dir, "empty40m"), 40<<20)                // no data at all
	sparseFile(t, filepath.Join(dir, "tail"), 8<<20, 8<<20-1000)         // ends in data
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	sparseFile(t, filepath.Join(dir, "sub", "mid"), 3<<20+7, 1<<20+1) // odd size, unaligned data
	writeFile(t, filepath.Join(dir, "small.txt"), "hello\n", 0o644)
	// Written zeros are allocated: not sparse, archived plain, restored allocated.
	must(t, os.WriteFile(filepath.Join(dir, "zeros"), make([]byte, 2<<20), 0o600))
	return dir, []string{"disk.img", "empty40m", "sub/mid", "tail"}, []string{"small.txt", "zeros"}
}

func TestSparseFilesRoundTrip(t *testing.T) {
	src, sparse, plain := sparseTree(t)
	data, m := capture(t, src)
	kinds := map[string]bool{}
	for _, e := range m.Entries {
		kinds[e.Path] = e.Sparse
	}
	for _, p := range sparse {
		if !kinds[p] {
			t.Errorf("%s not archived sparse", p)
		}
	}
	for _, p := range plain {
		if kinds[p] {
			t.Errorf("%s archived sparse", p)
		}
	}
	// Holes are not archived: 40+40+8+3 MiB of length, 4 blocks of 64 KiB of data.
	if len(data) > 1<<20 {
		t.Fatalf("archive is %d bytes", len(data))
	}
	// archive/tar reads the sparse entries back as the files' bytes.
	seen := readTarContents(t, data)
	for _, p := range append(sparse, plain...) {
		if seen[p] != fileSHA(t, filepath.Join(src, p)) {
			t.Errorf("archive/tar reads %s as %s, the file is %s", p, seen[p], fileSHA(t, filepath.Join(src, p)))
		}
	}
	if _, err := ReadManifest(context.Background(), bytes.NewReader(data)); err != nil {
		t.Fatalf("verify: %v", err)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := restoreInto(t, data, filepath.Dir(dst), "restored"); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if d := diffMaps(describe(t, src, true, nil), describe(t, dst, true, nil)); d != "" {
		t.Fatalf("restored tree differs:\n%s", d)
	}
	held := 0
	for _, p := range sparse {
		got, was := allocated(t, filepath.Join(dst, p)), allocated(t, filepath.Join(src, p))
		if got > was+64<<10 {
			t.Errorf("%s restored with %d bytes allocated; the original has %d", p, got, was)
		} else {
			held++
		}
	}
	if got := allocated(t, filepath.Join(dst, "zeros")); got < 2<<20 {
		t.Errorf("written zeros restored as holes (%d bytes allocated)", got)
	}
	t.Logf("sparse round trip: %d sparse files (%d MiB of length) in a %d-byte archive, %d of %d restored byte-exact with no more blocks than the original; %d plain files stayed plain",
		len(sparse), m.Totals.Bytes>>20, len(data), held, len(sparse), len(plain))
}

// readTarContents reads a snapshot with archive/tar alone and returns each file's SHA-256.
func readTarContents(t testing.TB, data []byte) map[string]string {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data))
	must(t, err)
	defer dec.Close()
	tr := tar.NewReader(dec)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		if h.Typeflag == tar.TypeReg {
			sum := sha256.New()
			n, err := io.Copy(sum, tr)
			must(t, err)
			if n != h.Size {
				t.Fatalf("%s: read %d bytes, header says %d", h.Name, n, h.Size)
			}
			out[h.Name] = hex.EncodeToString(sum.Sum(nil))
		}
	}
}

// GNU tar extracts the sparse entries as the files they were, holes as holes.
func TestSparseFilesExtractWithGNUTar(t *testing.T) {
	needTool(t, "zstd")
	needTool(t, "tar")
	if out, err := exec.Command("tar", "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU tar")) {
		t.Skip("tar is not GNU tar")
	}
	src, sparse, plain := sparseTree(t)
	data, _ := capture(t, src)
	dst := t.TempDir()
	cmd := exec.Command("sh", "-c", "zstd -dc | tar -xf - -C "+dst)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zstd -d | tar -x: %v\n%s", err, out)
	}
	ok := 0
	for _, p := range append(sparse, plain...) {
		a, b := filepath.Join(src, p), filepath.Join(dst, p)
		fa, err := os.Stat(a)
		must(t, err)
		fb, err := os.Stat(b)
		if err != nil {
			t.Errorf("tar -x: %v", err)
			continue
		}
		switch {
		case fa.Size() != fb.Size():
			t.Errorf("%s: tar -x made %d bytes, the file has %d", p, fb.Size(), fa.Size())
		case fileSHA(t, a) != fileSHA(t, b):
			t.Errorf("%s: tar -x made different bytes", p)
		case allocated(t, b) > allocated(t, a)+64<<10:
			t.Errorf("%s: tar -x allocated %d bytes, the original %d", p, allocated(t, b), allocated(t, a))
		default:
			ok++
		}
	}
	// No GNUSparseFile.* or PaxHeaders directories: tar understood the format.
	ents, err := os.ReadDir(dst)
	must(t, err)
	for _, e := range ents {
		if e.IsDir() && e.Name() != "sub" {
			t.Errorf("tar -x left %s", e.Name())
		}
	}
	t.Logf("GNU tar: %d of %d files extracted byte-exact (%d sparse, holes kept)", ok, len(sparse)+len(plain), len(sparse))
}

// A 1 TiB file with one block of data: the capture reads and archives that block only, and a
// restore is refused before anything is written, under a limit and beyond the free space.
func TestSparseTebibyte(t *testing.T) {
	src := t.TempDir()
	const size = 1 << 40
	f, err := os.Create(filepath.Join(src, "huge"))
	must(t, err)
	if err := f.Truncate(size); err != nil {
		f.Close()
		t.Skipf("no 1 TiB file here: %v", err)
	}
	_, err = f.WriteAt([]byte("the one block of data"), size/2)
	must(t, err)
	must(t, f.Close())

	data, m := capture(t, src)
	if e := m.Entries[0]; e.Path != "huge" || e.Size != size || !e.Sparse {
		t.Fatalf("entry %+v", e)
	}
	if len(data) > 16<<10 {
		t.Fatalf("the archive of a 1 TiB file with one block of data is %d bytes", len(data))
	}
	tried, held := 0, 0
	refused := func(opts RestoreOptions, code string) {
		t.Helper()
		tried++
		parent := t.TempDir()
		opts.Dir = "copy"
		_, err := Restore(context.Background(), openRoot(t, parent), bytes.NewReader(data), opts)
		wantCode(t, err, code)
		if ents, _ := os.ReadDir(parent); len(ents) != 0 {
			t.Fatalf("a refused restore left %v", ents)
		}
		held++
	}
	// Announced (as the controller does, from the receipt): refused before reading the stream.
	refused(RestoreOptions{MaxBytes: m.Totals.Bytes, MaxApparentBytes: 1 << 30}, CodeTooLarge)
	// Not announced: refused at the entry's header, before its file is created.
	refused(RestoreOptions{MaxApparentBytes: 1 << 30}, CodeTooLarge)
	if free := freeSpace(t, t.TempDir()); free < size {
		refused(RestoreOptions{MaxBytes: m.Totals.Bytes}, CodeNoSpace)
		refused(RestoreOptions{}, CodeNoSpace)
	}
	t.Logf("1 TiB sparse file: archive %d bytes; %d restores refused before writing, %d held", len(data), tried, held)
}

func freeSpace(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	must(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

// The digest of a sparse entry is one of its bytes: the same however they are split, holes
// or written zeros, and different when one byte moves.
func TestContentHashIsOfTheBytes(t *testing.T) {
	b := make([]byte, 5*sparseBlock+100)
	copy(b[sparseBlock+10:], "data")
	b[len(b)-1] = 1
	whole := newContentHash(int64(len(b)))
	whole.Write(b)
	split := newContentHash(int64(len(b)))
	split.Write(b[:7])
	split.skipTo(sparseBlock + 10) // zeros in between
	split.Write(b[sparseBlock+10 : 3*sparseBlock+1])
	split.skipTo(int64(len(b) - 1))
	split.Write(b[len(b)-1:])
	if whole.hex() != split.hex() {
		t.Fatal("digest depends on how the bytes came")
	}
	moved := bytes.Clone(b)
	moved[sparseBlock+10], moved[sparseBlock+11] = 0, 'd'
	other := newContentHash(int64(len(b)))
	other.Write(moved)
	longer := newContentHash(int64(len(b)) + 1)
	longer.Write(append(bytes.Clone(b), 0))
	if other.hex() == whole.hex() || longer.hex() == whole.hex() {
		t.Fatal("digest misses a moved byte or a trailing zero")
	}
}
