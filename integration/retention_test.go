package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/tetherhq/tether/controller/api"
)

func (c *controllerProc) du(t *testing.T) api.StorageUsage {
	t.Helper()
	var u api.StorageUsage
	if err := json.Unmarshal([]byte(c.mustCLI(t, "storage", "du", "--json")), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

func ownBytes(u api.StorageUsage, ws string) int64 {
	for _, w := range u.Workspaces {
		if w.WorkspaceID == ws {
			return w.Bytes
		}
	}
	return 0
}

// A workspace with several receipts, pruned to two: the removed receipts are gone, every kept
// one restores exactly, gc with no grace frees the removed ones' bytes and du shows it; then
// rm --purge and gc give the rest of the space back.
func TestRetentionPruneGCAndPurge(t *testing.T) {
	c := startController(t, serveOpts{})
	path := func(key string) string { return filepath.Join(c.Data, "blobs", filepath.FromSlash(key)) }
	testRetention(t, c, func(key string) bool {
		_, err := os.Stat(path(key))
		return os.IsNotExist(err)
	}, func(key string) int64 {
		fi, err := os.Stat(path(key))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	})
}

// The same on S3 (MinIO), where sizes come from the bucket's listing and objects are encrypted.
func TestRetentionPruneGCAndPurgeS3(t *testing.T) {
	s3 := minioFor(t)
	c := startController(t, serveOpts{extraArgs: []string{"--blobs", s3.url}})
	testRetention(t, c, func(key string) bool {
		_, err := s3.srv.Client().StatObject(context.Background(), s3.bucket, "tether/"+key, minio.StatObjectOptions{})
		return minio.ToErrorResponse(err).Code == "NoSuchKey"
	}, func(key string) int64 {
		info, err := s3.srv.Client().StatObject(context.Background(), s3.bucket, "tether/"+key, minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.Size
	})
}

// testRetention makes full captures (--full): each receipt's objects are its archive and its
// resolved manifest, needed by no other receipt. (Layers shared by incremental receipts are
// TestRetentionKeepsLayersOfLiveReceipts'.)
func testRetention(t *testing.T, c *controllerProc, gone func(key string) bool, size func(key string) int64) {
	ws := c.createWorkspace(t, "--name", "kept")
	var snaps []api.Snapshot
	var listings []string
	for i := range 4 {
		c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "head -c 200000 /dev/urandom > blob-$0; echo $0 > version", string(rune('0'+i)))
		listings = append(listings, c.listing(t, ws.ID))
		var snap api.Snapshot
		if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", ws.ID, "--full", "--json")), &snap); err != nil {
			t.Fatal(err)
		}
		if len(snap.Layers) != 0 || snap.ManifestKey == "" {
			t.Fatalf("a full capture: %+v", snap)
		}
		snaps = append(snaps, snap)
	}
	manifests := map[string]int64{} // sized now: the objects of removed receipts go later
	for _, s := range snaps {
		manifests[s.ID] = size(s.ManifestKey)
	}
	stored := func(ss ...api.Snapshot) int64 {
		var n int64
		for _, s := range ss {
			n += s.Bytes + manifests[s.ID]
		}
		return n
	}
	all := stored(snaps...)
	if u := c.du(t); ownBytes(u, ws.ID) != all || u.Unreferenced.Bytes != 0 {
		t.Fatalf("du before: %+v; want %d bytes of %s's own", u, all, ws.ID)
	}

	// The newest receipt of a live workspace stays.
	r := c.cli(t, nil, "snapshot", "rm", snaps[3].ID)
	if r.Code == 0 || !strings.Contains(r.Stderr, "conflict") || !strings.Contains(r.Stderr, "reopen restores from it") {
		t.Fatalf("snapshot rm of the newest: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var dry api.PruneResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "prune", ws.ID, "--keep-last", "2", "--dry-run", "--json")), &dry); err != nil ||
		len(dry.Removed) != 2 || len(c.snapshots(t, ws.ID)) != 4 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	out := c.mustCLI(t, "snapshot", "prune", ws.ID, "--keep-last", "2")
	for _, want := range []string{"keep    " + snaps[3].ID, "remove  " + snaps[0].ID, "newest,last", "kept 2, removed 2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("prune printed:\n%s\nwant %q", out, want)
		}
	}
	left := c.snapshots(t, ws.ID)
	if len(left) != 2 || left[0].ID != snaps[2].ID || left[1].ID != snaps[3].ID {
		t.Fatalf("receipts after prune: %+v", left)
	}
	if r := c.cli(t, nil, "snapshot", "show", snaps[0].ID); r.Code == 0 || !strings.Contains(r.Stderr, "not_found") {
		t.Fatalf("a pruned receipt: exit %d %s", r.Code, r.Stderr)
	}
	for i := 2; i < 4; i++ {
		var restored api.Workspace
		if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "restore", snaps[i].ID, "--json")), &restored); err != nil {
			t.Fatal(err)
		}
		if got := c.listing(t, restored.ID); got != listings[i] {
			t.Fatalf("receipt %d restores as\n%s\nwant\n%s", i, got, listings[i])
		}
		c.mustCLI(t, "workspace", "rm", restored.ID)
	}
	u := c.du(t)
	if u.Unreferenced.Bytes != stored(snaps[0], snaps[1]) || ownBytes(u, ws.ID) != stored(snaps[2], snaps[3]) {
		t.Fatalf("du after prune: %+v", u)
	}
	kept := stored(snaps[2], snaps[3])

	res := c.gc(t, "--grace", "0s")
	if res.Objects.Bytes != stored(snaps[0], snaps[1]) || res.Objects.Objects != 4 {
		t.Fatalf("gc: %+v", res)
	}
	for i, s := range snaps {
		if gone(s.ObjectKey) != (i < 2) || gone(s.ManifestKey) != (i < 2) {
			t.Fatalf("objects of receipt %d after gc: archive gone %v, manifest gone %v", i, gone(s.ObjectKey), gone(s.ManifestKey))
		}
	}
	if u := c.du(t); u.Unreferenced.Bytes != 0 || ownBytes(u, ws.ID) != kept || u.Total.Bytes != ownBytes(u, ws.ID) {
		t.Fatalf("du after gc: %+v", u)
	}
	c.mustCLI(t, "snapshot", "verify", snaps[2].ID)

	// rm --purge, then gc: the space is back.
	c.mustCLI(t, "workspace", "rm", "--purge", ws.ID)
	if u := c.du(t); u.Unreferenced.Bytes != kept || ownBytes(u, ws.ID) != 0 {
		t.Fatalf("du after purge: %+v", u)
	}
	// Purging again (the workspace is deleted) finds nothing left, and fails nothing.
	c.mustCLI(t, "workspace", "rm", "--purge", ws.ID)
	if res := c.gc(t, "--grace", "0s"); res.Objects.Bytes != kept {
		t.Fatalf("gc after purge: %+v", res)
	}
	if u := c.du(t); u.Total != (api.StorageFigure{}) {
		t.Fatalf("du at the end: %+v", u)
	}
}

// heldWriter holds its first write until proceed is closed, after saying it started: the
// export's response is then held open mid-stream, its archive open on the controller.
type heldWriter struct {
	started, proceed chan struct{}
	once             bool
	h                hash.Hash
}

func (g *heldWriter) Write(p []byte) (int, error) {
	if !g.once {
		g.once = true
		close(g.started)
		<-g.proceed
	}
	return g.h.Write(p)
}

// gc with no grace, while an export of a removed receipt is streaming, leaves its object (du
// shows it in flight); the export ends whole and verified; the next gc frees the object.
func TestRetentionGCSparesARunningExport(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "read")
	// Far more than the socket buffers hold, so the export is still reading when held.
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "head -c 67108864 /dev/urandom > big")
	old := c.snapshot(t, ws.ID)
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "rm big; echo small > f")
	c.snapshot(t, ws.ID)
	objectPath := filepath.Join(c.Data, "blobs", filepath.FromSlash(old.ObjectKey))
	manifest, err := os.Stat(filepath.Join(c.Data, "blobs", filepath.FromSlash(old.ManifestKey)))
	if err != nil {
		t.Fatal(err)
	}
	oldStored := old.Bytes + manifest.Size()

	cl := c.Client(t)
	w := &heldWriter{started: make(chan struct{}), proceed: make(chan struct{}), h: sha256.New()}
	done := make(chan error, 1)
	go func() {
		_, err := cl.ExportSnapshot(context.Background(), old.ID, w)
		done <- err
	}()
	<-w.started
	c.mustCLI(t, "snapshot", "rm", old.ID)
	if u := c.du(t); u.InFlight.Bytes != oldStored || u.Unreferenced.Bytes != 0 {
		close(w.proceed)
		t.Fatalf("du during the export: %+v", u)
	}
	if res := c.gc(t, "--grace", "0s"); res.Objects.Objects != 0 {
		close(w.proceed)
		t.Fatalf("gc during the export: %+v", res)
	}
	if _, err := os.Stat(objectPath); err != nil {
		close(w.proceed)
		t.Fatalf("the object under the export: %v", err)
	}
	close(w.proceed)
	if err := <-done; err != nil {
		t.Fatalf("the export: %v", err)
	}
	// Unencrypted, the export is the stored object itself.
	if got := hex.EncodeToString(w.h.Sum(nil)); got != old.SHA256 {
		t.Fatalf("exported sha256 %s, receipt %s", got, old.SHA256)
	}
	if res := c.gc(t, "--grace", "0s"); res.Objects.Objects != 2 || res.Objects.Bytes != oldStored {
		t.Fatalf("gc after the export: %+v", res)
	}
	if _, err := os.Stat(objectPath); !os.IsNotExist(err) {
		t.Fatalf("the object after the export: %v", err)
	}
}

// An incremental receipt reads its parent's archive as a layer: removing the parent's receipt
// and collecting frees only the parent's resolved manifest, the child still restores exactly;
// once a full capture stands alone and the child goes too, gc frees the layer.
func TestRetentionKeepsLayersOfLiveReceipts(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "chain")
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "head -c 300000 /dev/urandom > base.bin")
	c.snapshot(t, ws.ID)
	// Captures until one refers to an earlier receipt's bytes (a file written within the racy
	// window of a capture's start is read again by the next); that receipt is the parent.
	var child, parent api.Snapshot
	for range 5 {
		c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "date +%s%N > stamp")
		if child = c.snapshot(t, ws.ID); len(child.Layers) > 0 {
			break
		}
	}
	for _, s := range c.snapshots(t, ws.ID) {
		if len(child.Layers) == 1 && s.ObjectKey == child.Layers[0] {
			parent = s
		}
	}
	if parent.ID == "" {
		t.Fatalf("no capture refers to one earlier receipt's archive: %+v", child)
	}
	want := c.listing(t, ws.ID)
	for _, s := range c.snapshots(t, ws.ID) {
		if s.ID != child.ID {
			c.mustCLI(t, "snapshot", "rm", s.ID)
		}
	}
	c.gc(t, "--grace", "0s")
	path := func(key string) string { return filepath.Join(c.Data, "blobs", filepath.FromSlash(key)) }
	if _, err := os.Stat(path(parent.ObjectKey)); err != nil {
		t.Fatalf("gc took the layer a live receipt reads: %v", err)
	}
	if _, err := os.Stat(path(parent.ManifestKey)); !os.IsNotExist(err) {
		t.Fatalf("the removed parent's resolved manifest is still there: %v", err)
	}
	var restored api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "restore", child.ID, "--json")), &restored); err != nil {
		t.Fatal(err)
	}
	if got := c.listing(t, restored.ID); got != want {
		t.Fatalf("the child restores as\n%s\nwant\n%s", got, want)
	}
	c.mustCLI(t, "workspace", "rm", restored.ID)

	var full api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", ws.ID, "--full", "--json")), &full); err != nil || len(full.Layers) != 0 {
		t.Fatalf("full capture: %+v %v", full, err)
	}
	c.mustCLI(t, "snapshot", "rm", child.ID)
	c.gc(t, "--grace", "0s")
	for _, key := range []string{parent.ObjectKey, child.ObjectKey, child.ManifestKey} {
		if _, err := os.Stat(path(key)); !os.IsNotExist(err) {
			t.Fatalf("%s outlived every receipt that needed it: %v", key, err)
		}
	}
	if u := c.du(t); ownBytes(u, ws.ID) != u.Total.Bytes || u.Unreferenced.Bytes != 0 {
		t.Fatalf("du at the end: %+v", u)
	}
}
