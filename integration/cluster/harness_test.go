package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	h "github.com/tetherhq/tether/integration/clusterharness"
)

// TestClusterHarness: one controller in its namespace, on PostgreSQL and S3, behind HAProxy in
// either mode — the whole journey of a workspace through the balancer, with the Go client and
// the CLI, and the runner dialing the balancer from inside the controller's namespace.
func TestClusterHarness(t *testing.T) {
	for _, mode := range []string{h.ModeHTTP, h.ModeTCP} {
		t.Run(mode, func(t *testing.T) { harnessJourney(t, mode) })
	}
}

func harnessJourney(t *testing.T, mode string) {
	c := h.New(t, h.Options{Controllers: 1, Mode: mode})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "harness", Provider: "local"})
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	if ws.State != api.StateReady || ws.AllocationID == "" {
		t.Fatalf("created workspace %+v; want ready with an allocation", ws)
	}

	// The CLI, through the balancer: exec, mkdir, files put (stdin), and the Go client reads it.
	if out := c.MustCLI(t, nil, "exec", ws.ID, "--", "echo", "hi"); out != "hi\n" {
		t.Fatalf("tether exec echo hi printed %q", out)
	}
	c.MustCLI(t, nil, "files", "mkdir", ws.ID, "dir")
	content := []byte(strings.Repeat("through the balancer\n", 4096))
	c.MustCLI(t, bytes.NewReader(content), "files", "put", ws.ID, "-", "dir/file.txt")
	var got bytes.Buffer
	res, err := cl.ReadFile(ctx, ws.ID, "dir/file.txt", &got, client.ReadOptions{})
	if err != nil {
		t.Fatalf("read the file back: %v", err)
	}
	if !bytes.Equal(got.Bytes(), content) || res.SHA256 != sha256Hex(content) {
		t.Fatalf("read back %d bytes (sha256 %s); want %d", got.Len(), res.SHA256, len(content))
	}
	// The Go client: a write, and the CLI reads it.
	if _, err := cl.WriteFile(ctx, ws.ID, "second.txt", strings.NewReader("second\n"), client.WriteOptions{}); err != nil {
		t.Fatalf("write a file: %v", err)
	}
	if out := c.MustCLI(t, nil, "files", "get", ws.ID, "second.txt"); out != "second\n" {
		t.Fatalf("tether files get printed %q", out)
	}

	// A snapshot stored in S3 (encrypted, by default there) and verified against its receipt.
	snap, err := cl.CreateSnapshot(ctx, ws.ID)
	if err != nil {
		t.Fatalf("snapshot create: %v", err)
	}
	if !snap.Encrypted || snap.Bytes == 0 || snap.Entries < 3 {
		t.Fatalf("snapshot %+v; want an encrypted object holding the files", snap)
	}
	c.MustCLI(t, nil, "snapshot", "verify", snap.ID)
	objects := 0
	for o := range c.S3.Client().ListObjects(ctx, c.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		objects++
	}
	if objects == 0 {
		t.Fatalf("the bucket %s holds no object after a snapshot", c.Bucket)
	}

	// Close: nothing new since the snapshot, so it saves nothing more and releases the sandbox.
	var closed api.CloseResult
	if err := cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{}, &closed); err != nil {
		t.Fatalf("close: %v", err)
	}
	if closed.Workspace.State != api.StateClosed || closed.Saved == "" {
		t.Fatalf("close answered %+v; want closed, saved in a receipt", closed)
	}
	var shown api.Workspace
	if err := json.Unmarshal([]byte(c.MustCLI(t, nil, "workspace", "show", ws.ID, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.State != api.StateClosed {
		t.Fatalf("after close the workspace is %s", shown.State)
	}
}

// TestClusterNetwork: the harness's own parts, on three controllers (New has checked that each
// node reaches the next directly) — the balancer routes around a controller cut off the
// network, killed or stopped, and a restored or restarted one is back behind it.
func TestClusterNetwork(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 3})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Requests that need no runner are answered by any controller from the shared store.
	answers := func(when string) {
		t.Helper()
		for range 6 { // twice round the three
			if _, err := cl.ListWorkspaces(ctx, false); err != nil {
				t.Fatalf("%s: list through the balancer: %v", when, err)
			}
		}
	}
	answers("all up")
	want := func(states ...string) {
		t.Helper()
		got := c.LB.States(t)
		for i, s := range states {
			if name := c.Controllers[i].Name; got[name] != s {
				t.Fatalf("haproxy sees %v; want %s %s", got, name, s)
			}
		}
	}

	c.Cut(t, 0)
	want("DOWN", "UP", "UP")
	if !c.Controllers[0].Running() {
		t.Fatal("the cut controller's process exited")
	}
	answers("c1 cut off")
	c.Restore(t, 0)
	answers("c1 restored")

	c.Controllers[1].Kill(t)
	c.LB.WaitState(t, c.Controllers[1].Name, "DOWN")
	answers("c2 killed")
	c.Controllers[1].Start(t)
	c.WaitUp(t)
	answers("c2 restarted")

	c.Controllers[2].Stop(t)
	c.LB.WaitState(t, c.Controllers[2].Name, "DOWN")
	want("UP", "UP", "DOWN")
	answers("c3 stopped")
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
