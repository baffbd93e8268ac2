package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/protocol"
)

const testUploadID = protocol.UploadIDPrefix + "abcdefghijklmnopqrstuvwxyz234567"

// sendChunk runs fs_upload_chunk with body; cutAfter ≥ 0 aborts the body after that many bytes,
// the way a controller does when its client goes away.
func sendChunk(t *testing.T, sess *yamux.Session, args protocol.FsUploadChunkArgs, body []byte, cutAfter int) protocol.Trailer {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw, _ := json.Marshal(args)
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpFsUploadChunk, Epoch: 1, Args: raw}); err != nil {
		t.Fatal(err)
	}
	bw := protocol.NewBodyWriter(st)
	if cutAfter >= 0 {
		_, _ = bw.Write(body[:cutAfter])
		_ = bw.Abort(errors.New("client went away"))
	} else {
		_, _ = bw.Write(body)
		_, _ = bw.Finish()
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

func uploadStatus(t *testing.T, sess *yamux.Session) (protocol.FsUploadStatus, protocol.Trailer) {
	t.Helper()
	tr := op(t, sess, protocol.OpFsUploadStatus, 0, protocol.FsUploadSessionArgs{Session: testUploadID})
	var st protocol.FsUploadStatus
	if tr.OK {
		if err := json.Unmarshal(tr.Result, &st); err != nil {
			t.Fatal(err)
		}
	}
	return st, tr
}

func uploadRunner(t *testing.T) (*Runner, *yamux.Session, *clockwork.FakeClock) {
	t.Helper()
	r, sess := pipeRunner(t)
	fc := clockwork.NewFakeClock()
	r.cfg.Clock = fc
	r.uploads = newUploadTable(t.TempDir())
	t.Cleanup(r.uploads.close)
	return r, sess, fc
}

func uploadArgs(content []byte, fc clockwork.Clock) protocol.FsUploadChunkArgs {
	sum := sha256.Sum256(content)
	return protocol.FsUploadChunkArgs{Session: testUploadID, Path: "dir/big.bin", Size: int64(len(content)),
		SHA256: hex.EncodeToString(sum[:]), Mode: 0o640, ExpiresAt: fc.Now().Add(time.Hour)}
}

func chunkAt(a protocol.FsUploadChunkArgs, off, n int64) protocol.FsUploadChunkArgs {
	a.Offset, a.Length = off, n
	return a
}

func wantUploadCode(t *testing.T, what string, tr protocol.Trailer, code protocol.Code) {
	t.Helper()
	if tr.OK || tr.Error == nil || tr.Error.Code != code {
		t.Fatalf("%s: %+v (error %+v); want %s", what, tr, tr.Error, code)
	}
}

// Chunks are staged outside the workspace, a chunk cut half-way is taken back (file and hash),
// the offset the runner reports is what it holds, and the file appears only once whole.
func TestUploadStagesPrivatelyAndResumesAfterACut(t *testing.T) {
	r, sess, fc := uploadRunner(t)
	if err := os.Mkdir(filepath.Join(r.cfg.Root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("0123456789abcdef"), 3<<14) // 768 KiB
	a := uploadArgs(content, fc)
	third := int64(len(content) / 3)
	if tr := sendChunk(t, sess, chunkAt(a, 0, third), content[:third], -1); !tr.OK {
		t.Fatalf("first chunk: %+v", tr.Error)
	}
	// The second chunk is cut after some of its bytes: nothing of it stays.
	tr := sendChunk(t, sess, chunkAt(a, third, third), content[third:2*third], 1000)
	if tr.OK {
		t.Fatal("a cut chunk was accepted")
	}
	st, tr := uploadStatus(t, sess)
	if !tr.OK || st.Offset != third || st.Done {
		t.Fatalf("status after a cut chunk = %+v, %+v; want offset %d", st, tr.Error, third)
	}
	if fi, err := os.Stat(filepath.Join(r.uploads.dir, testUploadID)); err != nil || fi.Size() != third {
		t.Fatalf("staged file: %v, %v; want %d bytes", fi, err, third)
	}
	if entries, _ := os.ReadDir(filepath.Join(r.cfg.Root, "dir")); len(entries) != 0 {
		t.Fatalf("the workspace holds %v before the upload is complete", entries)
	}
	// A chunk at another offset is refused, naming the one held.
	wantUploadCode(t, "chunk at a wrong offset", sendChunk(t, sess, chunkAt(a, 2*third, third), content[2*third:3*third], -1), protocol.CodeConflict)
	for off := third; off < a.Size; off += third {
		n := min(third, a.Size-off)
		if tr := sendChunk(t, sess, chunkAt(a, off, n), content[off:off+n], -1); !tr.OK {
			t.Fatalf("chunk at %d: %+v", off, tr.Error)
		}
	}
	got, err := os.ReadFile(filepath.Join(r.cfg.Root, "dir", "big.bin"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("published file: %d bytes, %v; want the %d bytes sent", len(got), err, len(content))
	}
	if fi, _ := os.Stat(filepath.Join(r.cfg.Root, "dir", "big.bin")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v; want 0640", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(r.uploads.dir, testUploadID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staged bytes left after the publish: %v", err)
	}
	st, tr = uploadStatus(t, sess)
	if !tr.OK || !st.Done || st.Result == nil || st.Result.SHA256 != a.SHA256 || st.Result.Bytes != a.Size {
		t.Fatalf("status after the publish = %+v, %+v", st, tr.Error)
	}
	// The last chunk again (its answer lost): done, nothing written twice.
	tr = sendChunk(t, sess, chunkAt(a, a.Size-third, third), content[a.Size-third:], -1)
	if !tr.OK {
		t.Fatalf("a repeat of the last chunk: %+v", tr.Error)
	}
}

// Content that does not hash to the declared SHA-256 publishes nothing and drops the session.
func TestUploadWrongDigestPublishesNothing(t *testing.T) {
	r, sess, fc := uploadRunner(t)
	content := bytes.Repeat([]byte{7}, 4096)
	a := uploadArgs(content, fc)
	a.Path = "f.bin"
	content[100] = 8
	wantUploadCode(t, "a file whose digest differs", sendChunk(t, sess, chunkAt(a, 0, a.Size), content, -1), protocol.CodeCorrupt)
	if _, err := os.Stat(filepath.Join(r.cfg.Root, "f.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file whose digest differs was published: %v", err)
	}
	if _, tr := uploadStatus(t, sess); tr.OK || tr.Error.Code != protocol.CodeNotFound {
		t.Fatalf("status of a dropped session: %+v", tr)
	}
	if entries, _ := os.ReadDir(r.uploads.dir); len(entries) != 0 {
		t.Fatalf("staged bytes left: %v", entries)
	}
}

// Malformed ids, chunks past the total, and a session described differently are refused; a
// session past its expiry is dropped with its bytes.
func TestUploadRefusalsAndExpiry(t *testing.T) {
	r, sess, fc := uploadRunner(t)
	content := bytes.Repeat([]byte{1}, 1000)
	a := uploadArgs(content, fc)
	a.Path = "f.bin"
	bad := chunkAt(a, 0, 10)
	bad.Session = "up_../../etc"
	wantUploadCode(t, "a malformed id", sendChunk(t, sess, bad, content[:10], -1), protocol.CodeInvalidArgument)
	wantUploadCode(t, "a chunk past the total", sendChunk(t, sess, chunkAt(a, 990, 20), make([]byte, 20), -1), protocol.CodeInvalidRange)
	wantUploadCode(t, "an offset beyond the size", sendChunk(t, sess, chunkAt(a, 2000, 0), nil, -1), protocol.CodeInvalidRange)
	wantUploadCode(t, "a body longer than announced", sendChunk(t, sess, chunkAt(a, 0, 10), content[:20], -1), protocol.CodeInvalidRange)
	if tr := sendChunk(t, sess, chunkAt(a, 0, 100), content[:100], -1); !tr.OK {
		t.Fatalf("first chunk: %+v", tr.Error)
	}
	other := chunkAt(a, 100, 100)
	other.Replace = true
	wantUploadCode(t, "a chunk describing another file", sendChunk(t, sess, other, content[100:200], -1), protocol.CodeConflict)

	fc.Advance(2 * time.Hour)
	second := uploadArgs(content, fc)
	second.Session = protocol.UploadIDPrefix + "22222222222222222222222222222222"
	second.Path = "g.bin"
	if tr := sendChunk(t, sess, chunkAt(second, 0, 100), content[:100], -1); !tr.OK {
		t.Fatalf("another session's chunk: %+v", tr.Error)
	}
	if _, tr := uploadStatus(t, sess); tr.OK {
		t.Fatal("an expired session is still held")
	}
	if _, err := os.Stat(filepath.Join(r.uploads.dir, testUploadID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an expired session's bytes are still staged: %v", err)
	}
	if tr := op(t, sess, protocol.OpFsUploadAbort, 0, protocol.FsUploadSessionArgs{Session: second.Session}); !tr.OK {
		t.Fatalf("abort: %+v", tr.Error)
	}
	if entries, _ := os.ReadDir(r.uploads.dir); len(entries) != 0 {
		t.Fatalf("an aborted session's bytes are still staged: %v", entries)
	}
}
