package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func wantCodeOf(t *testing.T, what string, err error, code protocol.Code) {
	t.Helper()
	if protocol.CodeOf(err) != code {
		t.Fatalf("%s: %v; want %s", what, err, code)
	}
}

// Hostile requests get typed errors and change nothing: an offset beyond the size, a chunk past
// the total, a chunk at the wrong offset, another workspace's session id, a content whose whole
// SHA-256 is not the declared one (nothing published).
func TestUploadSessionRefusals(t *testing.T) {
	tc := newTestController(t)
	a, b := tc.liveWorkspace(t, "a"), tc.liveWorkspace(t, "b")
	cl, err := client.New(tc.url, tc.s.operatorToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	content := bytes.Repeat([]byte("resumable "), 100_000) // ~1 MiB
	size := int64(len(content))
	u, err := cl.CreateUpload(ctx, a.workspaceID, api.UploadCreate{Path: "big.bin", Size: size, SHA256: sha256Hex(content)})
	if err != nil {
		t.Fatal(err)
	}
	if !protocol.ValidUploadID(u.ID) || u.Offset != 0 || u.ExpiresAt.Sub(u.CreatedAt) != DefaultUploadTTL {
		t.Fatalf("created %+v", u)
	}
	_, err = cl.PutUploadChunk(ctx, a.workspaceID, u.ID, size+1, nil, 0)
	wantCodeOf(t, "an offset beyond the size", err, protocol.CodeInvalidRange)
	_, err = cl.PutUploadChunk(ctx, a.workspaceID, u.ID, size-10, bytes.NewReader(make([]byte, 20)), 20)
	wantCodeOf(t, "a chunk past the total", err, protocol.CodeInvalidRange)
	half := size / 2
	if _, err := cl.PutUploadChunk(ctx, a.workspaceID, u.ID, 0, bytes.NewReader(content[:half]), half); err != nil {
		t.Fatal(err)
	}
	_, err = cl.PutUploadChunk(ctx, a.workspaceID, u.ID, 0, bytes.NewReader(content[:half]), half)
	wantCodeOf(t, "a chunk at the wrong offset", err, protocol.CodeConflict)
	// Another workspace's session id is not found there, whatever is asked.
	_, err = cl.GetUpload(ctx, b.workspaceID, u.ID)
	wantCodeOf(t, "another workspace's session (get)", err, protocol.CodeNotFound)
	_, err = cl.PutUploadChunk(ctx, b.workspaceID, u.ID, half, bytes.NewReader(content[half:]), size-half)
	wantCodeOf(t, "another workspace's session (chunk)", err, protocol.CodeNotFound)
	wantCodeOf(t, "another workspace's session (abort)", cl.AbortUpload(ctx, b.workspaceID, u.ID), protocol.CodeNotFound)
	_, err = cl.GetUpload(ctx, a.workspaceID, "up_nope")
	wantCodeOf(t, "a malformed session id", err, protocol.CodeNotFound)

	got, err := cl.GetUpload(ctx, a.workspaceID, u.ID)
	if err != nil || got.Offset != half || got.Received != half {
		t.Fatalf("status = %+v, %v; want offset and received %d", got, err, half)
	}
	done, err := cl.UploadFile(ctx, a.workspaceID, u.ID, bytes.NewReader(content), client.UploadOptions{})
	if err != nil || done.Result == nil || done.Result.SHA256 != sha256Hex(content) {
		t.Fatalf("UploadFile = %+v, %v", done, err)
	}
	if on, err := os.ReadFile(filepath.Join(a.root, "big.bin")); err != nil || !bytes.Equal(on, content) {
		t.Fatalf("published file: %d bytes, %v", len(on), err)
	}
	if done.Received != size {
		t.Fatalf("received %d bytes for a %d-byte file sent once", done.Received, size)
	}

	// A declared digest the bytes do not have: corrupt, nothing published.
	bad, err := cl.CreateUpload(ctx, a.workspaceID, api.UploadCreate{Path: "bad.bin", Size: size, SHA256: sha256Hex([]byte("other"))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.UploadFile(ctx, a.workspaceID, bad.ID, bytes.NewReader(content), client.UploadOptions{ChunkSize: 300_000})
	wantCodeOf(t, "a content whose digest is not the declared one", err, protocol.CodeCorrupt)
	if _, err := os.Stat(filepath.Join(a.root, "bad.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("bad.bin published: %v", err)
	}
	if entries, _ := os.ReadDir(a.root); len(entries) != 1 {
		t.Fatalf("workspace holds %d entries; want big.bin alone", len(entries))
	}
	// An existing target without replace is said before any byte is sent.
	_, err = cl.CreateUpload(ctx, a.workspaceID, api.UploadCreate{Path: "big.bin", Size: 1, SHA256: sha256Hex([]byte("x"))})
	wantCodeOf(t, "a session over an existing file", err, protocol.CodeExists)
	_, err = cl.CreateUpload(ctx, a.workspaceID, api.UploadCreate{Path: "../escape", Size: 1, SHA256: sha256Hex([]byte("x"))})
	wantCodeOf(t, "a session for a path outside the workspace", err, protocol.CodePathEscape)
}

// Sessions past their expiry are removed by gc (on the controller's clock), the bytes the
// runner staged for them included.
func TestUploadSessionsExpire(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	tc := newTestController(t, withClock(fc))
	a := tc.liveWorkspace(t, "a")
	cl, err := client.New(tc.url, tc.s.operatorToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	content := bytes.Repeat([]byte{9}, 1<<20)
	u, err := cl.CreateUpload(ctx, a.workspaceID, api.UploadCreate{Path: "f.bin", Size: int64(len(content)), SHA256: sha256Hex(content)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutUploadChunk(ctx, a.workspaceID, u.ID, 0, bytes.NewReader(content[:1000]), 1000); err != nil {
		t.Fatal(err)
	}
	conn, err := tc.s.runnerFor(ctx, a.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	var st protocol.FsUploadStatus
	if err := conn.Call(ctx, protocol.OpFsUploadStatus, 0, protocol.FsUploadSessionArgs{Session: u.ID}, &st); err != nil || st.Offset != 1000 {
		t.Fatalf("runner status = %+v, %v", st, err)
	}
	if res, err := tc.s.GC(ctx, time.Hour, false); err != nil || res.ExpiredUploads != 0 {
		t.Fatalf("gc before the expiry: %+v, %v", res, err)
	}
	fc.Advance(DefaultUploadTTL + time.Minute)
	_, err = cl.GetUpload(ctx, a.workspaceID, u.ID)
	wantCodeOf(t, "an expired session", err, protocol.CodeNotFound)
	if _, err := tc.s.GC(ctx, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.store.GetUploadSession(ctx, u.ID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("the expired session's record is still there: %v", err)
	}
	err = conn.Call(ctx, protocol.OpFsUploadStatus, 0, protocol.FsUploadSessionArgs{Session: u.ID}, &st)
	wantCodeOf(t, "the runner's status of an expired session", err, protocol.CodeNotFound)
}
