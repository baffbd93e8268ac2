package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func (c *controllerProc) acquire(t *testing.T, ws string, args ...string) api.Lease {
	t.Helper()
	var l api.Lease
	out := c.mustCLI(t, append([]string{"lease", "acquire", ws, "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("lease acquire printed %q: %v", out, err)
	}
	return l
}

func TestLeaseFencesWriters(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "shared")
	alice := c.acquire(t, "shared", "--holder", "alice", "--ttl", "1m")
	if alice.Epoch != 1 || alice.Holder != "alice" || !alice.ExpiresAt.After(time.Now()) {
		t.Fatalf("lease: %+v", alice)
	}
	epochA := strconv.FormatUint(alice.Epoch, 10)

	// Bob cannot take it, and writes without the epoch are refused; reads need no lease.
	if r := c.cli(t, nil, "lease", "acquire", "shared", "--holder", "bob"); r.Code != 26 || !strings.HasPrefix(r.Stderr, "error: lease_held: ") {
		t.Fatalf("second acquire: %+v", r)
	}
	if r := c.cli(t, nil, "exec", "shared", "--", "touch", "nolease"); r.Code != 26 {
		t.Fatalf("exec without the epoch while leased: %+v", r)
	}
	if r := c.cli(t, strings.NewReader("x"), "files", "put", "shared", "-", "nolease"); r.Code != 26 {
		t.Fatalf("put without the epoch while leased: %+v", r)
	}
	if r := c.cli(t, nil, "files", "ls", "shared"); r.Code != 0 {
		t.Fatalf("a read while leased: %+v", r)
	}
	if r := c.cli(t, nil, "--epoch", epochA, "exec", "shared", "--", "touch", "by-alice"); r.Code != 0 {
		t.Fatalf("alice's exec: %+v", r)
	}
	var runs []api.Run
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", "shared", "--json")), &runs); err != nil || len(runs) != 1 || runs[0].Epoch != alice.Epoch {
		t.Fatalf("the run does not record its epoch: %v %+v", err, runs)
	}

	// Bob waits; alice releases; bob gets a higher epoch and alice is fenced from then on.
	bobDone := make(chan api.Lease, 1)
	go func() {
		var l api.Lease
		r := c.cli(t, nil, "lease", "acquire", "shared", "--holder", "bob", "--wait", "30s", "--json")
		_ = json.Unmarshal([]byte(r.Stdout), &l)
		bobDone <- l
	}()
	c.mustCLI(t, "--epoch", epochA, "lease", "release", "shared")
	bob := <-bobDone
	if bob.Holder != "bob" || bob.Epoch <= alice.Epoch {
		t.Fatalf("bob's lease after waiting: %+v", bob)
	}
	for _, args := range [][]string{
		{"exec", "shared", "--", "touch", "late-alice"},
		{"files", "mkdir", "shared", "late-dir"},
	} {
		if r := c.cli(t, nil, append([]string{"--epoch", epochA}, args...)...); r.Code != 9 || !strings.HasPrefix(r.Stderr, "error: stale_epoch: ") {
			t.Fatalf("fenced %v: %+v", args, r)
		}
	}
	for _, p := range []string{"late-alice", "late-dir", "nolease"} {
		if _, err := os.Lstat(filepath.Join(ws.Root, p)); err == nil {
			t.Fatalf("a refused write created %s", p)
		}
	}
	if r := c.cli(t, nil, "--epoch", strconv.FormatUint(bob.Epoch, 10), "files", "mkdir", "shared", "by-bob"); r.Code != 0 {
		t.Fatalf("bob's write: %+v", r)
	}

	// An expired holder is fenced too, and a waiter gets the lease once it expires.
	c.mustCLI(t, "--epoch", strconv.FormatUint(bob.Epoch, 10), "lease", "release", "shared")
	short := c.acquire(t, "shared", "--holder", "brief", "--ttl", "500ms")
	carol := c.acquire(t, "shared", "--holder", "carol", "--wait", "30s")
	if carol.Epoch <= short.Epoch {
		t.Fatalf("carol after an expiry: %+v (expired epoch %d)", carol, short.Epoch)
	}
	if r := c.cli(t, nil, "--epoch", strconv.FormatUint(short.Epoch, 10), "exec", "shared", "--", "true"); r.Code != 9 {
		t.Fatalf("the expired holder's exec: %+v", r)
	}
	var shown api.Lease
	if err := json.Unmarshal([]byte(c.mustCLI(t, "lease", "show", "shared", "--json")), &shown); err != nil || shown.Holder != "carol" {
		t.Fatalf("lease show: %v %+v", err, shown)
	}
	if got := c.showWorkspace(t, "shared"); got.Epoch != carol.Epoch {
		t.Fatalf("workspace epoch %d; want %d", got.Epoch, carol.Epoch)
	}
}

// A new writer taking the lease while a snapshot is captured makes that capture's receipt
// stale: it is refused and its object removed.
func TestReceiptRefusedWhenTheEpochMoves(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "moving")
	bigRandomFile(t, filepath.Join(ws.Root, "big"), 256<<20)
	create := c.cliCmd("snapshot", "create", "moving")
	var stderr strings.Builder
	create.Stderr = &stderr
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the capture to be under way", func() bool {
		ents, _ := os.ReadDir(filepath.Join(c.Data, "blobs", ".tmp"))
		return len(ents) > 0
	})
	c.acquire(t, "moving", "--holder", "newcomer")
	err := create.Wait()
	if err == nil || !strings.HasPrefix(stderr.String(), "error: stale_epoch: ") {
		t.Fatalf("capture across an epoch change: %v, %q", err, stderr.String())
	}
	noTrace(t, c, ws.ID)
}
