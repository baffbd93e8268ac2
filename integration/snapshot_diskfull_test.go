package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// A restore that runs out of disk fails cleanly: no workspace is handed out and no partial tree
// keeps the space. Needs a small tmpfs, so root and mount(2) permission.
func TestSnapshotRestoreOnAFullDisk(t *testing.T) {
	small := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(small, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=48m,mode=0700"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v); the full-disk restore needs one", err)
	}
	// Cleanups run last-in first-out: this one runs after the controller's.
	t.Cleanup(func() { _ = syscall.Unmount(small, syscall.MNT_DETACH) })

	c := startController(t, serveOpts{data: filepath.Join(small, "data"),
		extraArgs: []string{"--blobs", "file://" + filepath.Join(t.TempDir(), "blobs")}})
	ws := c.createWorkspace(t, "--name", "orig")
	bigRandomFile(t, filepath.Join(ws.Root, "big"), 20<<20)
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "orig", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	// Leave about 8 MiB: less than the 20 MiB a restore needs.
	var st syscall.Statfs_t
	if err := syscall.Statfs(small, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free > 8<<20 {
		if err := os.WriteFile(filepath.Join(small, "filler"), make([]byte, free-8<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := freeBytes(t, small)

	r := c.cli(t, nil, "snapshot", "restore", snap.ID, "--name", "copy")
	if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: ") {
		t.Fatalf("restore onto a full disk: %+v", r)
	}
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil || len(list) != 1 || list[0].ID != ws.ID {
		t.Fatalf("a failed restore left a workspace: %v %+v", err, list)
	}
	if after := freeBytes(t, small); after < before-(1<<20) {
		t.Fatalf("a failed restore kept %d bytes of disk", before-after)
	}
	// The original is untouched and still works.
	if r := c.cli(t, nil, "exec", "orig", "--", "sh", "-c", "wc -c < big"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "20971520" {
		t.Fatalf("original after the failed restore: %+v", r)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
