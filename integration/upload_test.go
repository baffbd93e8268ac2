package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// writeRandomFile writes size pseudo-random bytes (incompressible, cheap) and returns their SHA-256.
func writeRandomFile(t *testing.T, path string, size int64, seed uint64) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var s [32]byte
	s[0] = byte(seed)
	src := rand.NewChaCha8(s)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		p := buf[:min(left, int64(len(buf)))]
		_, _ = src.Read(p)
		h.Write(p)
		if _, err := f.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func mustSHA256(t *testing.T, path string) string {
	t.Helper()
	sum, err := fileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// A 1 GiB `tether files put` killed (SIGKILL) at three random offsets and continued with
// --resume each time ends with the file published whole (its SHA-256 equal), and no resume sent
// the verified prefix again: the controller received the file once, plus at most the three
// chunks that were cut.
func TestResumableUploadKilledThreeTimes(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	ctx := context.Background()
	const size = 1 << 30
	const chunk = 16 << 20
	local := filepath.Join(t.TempDir(), "big.bin")
	sum := writeRandomFile(t, local, size, 7)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 20))
	cuts := []int64{rng.Int64N(size / 3), size/3 + rng.Int64N(size/3), 2*size/3 + rng.Int64N(size/3-chunk)}
	slices.Sort(cuts)
	t.Logf("cutting at %v", cuts)

	var id string
	lastOffset := int64(0)
	for i, cut := range cuts {
		args := []string{"files", "put", "--chunk-size", "16777216", ws.ID, local, "big.bin"}
		if i > 0 {
			args = append(args[:2], append([]string{"--resume"}, args[2:]...)...)
		}
		cmd := c.cliCmd(args...)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		var u api.Upload
		eventually(t, 5*time.Minute, "the upload to pass the cut", func() bool {
			select {
			case <-exited:
				t.Fatalf("the put ended before its cut at %d: %s", cut, stderr.String())
			default:
			}
			list, err := cl.ListUploads(ctx, ws.ID, "big.bin", sum)
			if err != nil || len(list) == 0 {
				return false
			}
			if u, err = cl.GetUpload(ctx, ws.ID, list[0].ID); err != nil {
				return false
			}
			return u.Offset >= cut
		})
		// Mid-chunk, most likely: the next chunk is on its way.
		_ = cmd.Process.Kill()
		<-exited
		if id == "" {
			id = u.ID
		} else if u.ID != id {
			t.Fatalf("resume %d used session %s, not %s", i, u.ID, id)
		}
		after, err := cl.GetUpload(ctx, ws.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.Offset < lastOffset || after.Offset%chunk != 0 || after.Offset >= size || after.CompletedAt != nil {
			t.Fatalf("after cut %d the runner holds %d bytes (was %d); want a chunk boundary, not less, not done", i, after.Offset, lastOffset)
		}
		if _, err := os.Stat(filepath.Join(ws.Root, "big.bin")); err == nil {
			t.Fatalf("big.bin was published after cut %d, at %d of %d bytes", i, after.Offset, size)
		}
		t.Logf("cut %d at ≥%d: runner holds %d, controller received %d", i, cut, after.Offset, after.Received)
		lastOffset = after.Offset
	}
	out := c.mustCLI(t, "files", "put", "--resume", "--chunk-size", "16777216", "--json", ws.ID, local, "big.bin")
	if !strings.Contains(out, sum) {
		t.Fatalf("final put printed %s; want sha256 %s", out, sum)
	}
	if got := mustSHA256(t, filepath.Join(ws.Root, "big.bin")); got != sum {
		t.Fatalf("published big.bin hashes to %s; want %s", got, sum)
	}
	u, err := cl.GetUpload(ctx, ws.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if u.CompletedAt == nil || u.Offset != size {
		t.Fatalf("session after the last put: %+v", u)
	}
	// Each resume began at the verified offset: what was sent twice is at most the cut chunks.
	if u.Received < size || u.Received > size+3*chunk {
		t.Fatalf("the controller received %d bytes for a %d-byte file cut three times; want at most %d", u.Received, size, size+3*chunk)
	}
	t.Logf("received %d bytes (%d more than the file)", u.Received, u.Received-size)
	// Nothing staged is left in the workspace.
	entries, err := os.ReadDir(ws.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "big.bin" {
			t.Errorf("workspace root holds %s", e.Name())
		}
	}
	// A resume of a published upload says so and changes nothing.
	c.mustCLI(t, "files", "put", "--resume", ws.ID, local, "big.bin")
}

// A put below the threshold is one request; --resumable sends it through a session, an
// interruption prints how to resume, and tether cp of a large file resumes the same way.
func TestResumableSmallAndCp(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "small.bin")
	sum := writeRandomFile(t, local, 3<<20, 3)
	c.mustCLI(t, "files", "put", ws.ID, local, "plain.bin")
	if l, err := cl.ListUploads(context.Background(), ws.ID, "", ""); err != nil || len(l) != 0 {
		t.Fatalf("a small put made sessions: %+v, %v", l, err)
	}
	c.mustCLI(t, "files", "put", "--resumable", "--chunk-size", "1048576", ws.ID, local, "session.bin")
	if got := mustSHA256(t, filepath.Join(ws.Root, "session.bin")); got != sum {
		t.Fatalf("session.bin hashes to %s; want %s", got, sum)
	}
	l, err := cl.ListUploads(context.Background(), ws.ID, "session.bin", "")
	if err != nil || len(l) != 1 || l[0].CompletedAt == nil || l[0].Received != 3<<20 {
		t.Fatalf("sessions of session.bin = %+v, %v", l, err)
	}
	// --resume with nothing to resume is not_found (exit 3).
	if r := c.cli(t, nil, "files", "put", "--resume", ws.ID, local, "nothing.bin"); r.Code != 3 {
		t.Fatalf("resume of nothing: exit %d, %s", r.Code, r.Stderr)
	}

	big := filepath.Join(dir, "cp.bin")
	bigSum := writeRandomFile(t, big, 80<<20, 4)
	c.mustCLI(t, "cp", big, ws.ID+":cp.bin")
	if got := mustSHA256(t, filepath.Join(ws.Root, "cp.bin")); got != bigSum {
		t.Fatalf("cp.bin hashes to %s; want %s", got, bigSum)
	}
	if l, err := cl.ListUploads(context.Background(), ws.ID, "cp.bin", bigSum); err != nil || len(l) != 1 {
		t.Fatalf("tether cp of an 80 MiB file used no session: %+v, %v", l, err)
	}
}
