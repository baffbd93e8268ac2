package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tetherhq/tether/controller/api"
	h "github.com/tetherhq/tether/integration/clusterharness"
)

// Log lines of the startup blob sweep (controller/gc.go, sweepBlobs).
const (
	sweepLeftLine  = "blob sweep: left temporaries past the grace whose upload is running"
	sweepTakenLine = "blob sweep: swept temporaries past the grace with no running upload"
)

// sweepDataMiB is the random (incompressible) data the workspace holds, so its snapshot's upload
// lasts long enough to be caught in flight.
const sweepDataMiB = 256

// TestClusterSweepSparesInflightUpload: controller A uploads a large snapshot to S3 while
// controller B restarts with --sweep-grace 0s, so that its startup sweep finds A's temporary
// past the grace. B's sweep must leave it (A heartbeats it in the store's uploads table), A's
// upload must complete, and its receipt verify.
//
// To be sure the upload is in flight while B sweeps, the test waits until A's temporary is in
// the bucket and A's heartbeat for it is in the store, then holds A's connections to S3 (the
// relay stalls them) while B restarts — B's own connections pass — and releases them once B
// listens (its sweep runs before it listens).
//
// It can fail, and did with the heartbeat ignored (tried by hand on 2026-12-02, not committed):
//   - sweepBlobs passing a nil live to SweepTemporaries: A's temporary is gone from the bucket
//     when B listens ("is gone from the bucket after B's sweep");
//   - sweepBlobs' decide answering false whatever live says (so the sweep still logs): B logs
//     `blob sweep: swept temporaries … keys=[tether/.tmp/…] removed=2` (the object and its
//     multipart upload), the temporary is gone, and A's snapshot create, once released, fails
//     with `not_found: store snapshot: … blob put snapshots/…: upload`.
func TestClusterSweepSparesInflightUpload(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ai, bi = 0, 1
	a, b := c.ClientOf(t, ai), c.Controllers[bi]

	// The runner must not be B's, or B's restart would cut the capture: B in maintenance on
	// the balancer while the workspace is created (through A, which places it), so the runner
	// connects to A.
	c.LB.SetMaint(t, b.Name, true)
	ws := createOn(ctx, t, a, "sweep")
	c.LB.SetMaint(t, b.Name, false)
	c.WaitUp(t)
	start := time.Now()
	mustExec(ctx, t, a, ws, "sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > big.bin", sweepDataMiB<<20))
	t.Logf("%d MiB of random data written in %s", sweepDataMiB, time.Since(start).Round(time.Millisecond))

	type result struct {
		snap api.Snapshot
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start = time.Now()
	go func() {
		snap, err := a.CreateSnapshot(ctx, ws.ID)
		done <- result{snap, err, time.Since(start)}
	}()

	// A's upload in flight: its temporary in the bucket, and its heartbeat in the store.
	var key string
	st := c.Store(t)
	eventually(t, time.Minute, "A's temporary in the bucket with a live upload heartbeat", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the snapshot ended (%v) before its upload was seen in flight: it needs more than %d MiB here", r.err, sweepDataMiB)
		default:
		}
		tmps := temporaries(ctx, t, c)
		if len(tmps) == 0 {
			return false
		}
		live, err := st.LiveUploads(ctx, time.Now().Add(-10*time.Second))
		if err != nil {
			t.Fatalf("uploads in the store: %v", err)
		}
		for _, k := range tmps {
			if live[k] {
				key = k
				return true
			}
		}
		return false
	})
	release := c.S3Relay.Hold(t)
	t.Logf("A's upload to %s in flight %s after the snapshot began; held", key, time.Since(start).Round(time.Millisecond))

	// B restarts and sweeps with no grace: every temporary is past it.
	b.Kill(t)
	b.StartWith(t, "--sweep-grace", "0s")
	blog := b.RunLog(t)
	stillThere := false
	for _, k := range temporaries(ctx, t, c) {
		stillThere = stillThere || k == key
	}
	release()
	for line := range strings.Lines(blog) {
		if strings.Contains(line, sweepTakenLine) && strings.Contains(line, key) {
			t.Errorf("B swept A's temporary of a running upload: %s", line)
		}
	}
	if !stillThere {
		t.Fatalf("A's temporary %s is gone from the bucket after B's sweep; B's log:\n%s", key, blog)
	}
	if !strings.Contains(blog, sweepLeftLine) || !strings.Contains(blog, key) {
		t.Fatalf("B's sweep does not say it left %s to its running upload; B's log:\n%s", key, blog)
	}

	r := <-done
	if r.err != nil {
		t.Fatalf("A's snapshot create: %v", r.err)
	}
	t.Logf("A's snapshot %s: %d bytes uploaded in %s", r.snap.ID, r.snap.Bytes, r.took.Round(time.Millisecond))
	if r.snap.Bytes < sweepDataMiB<<20 {
		t.Fatalf("snapshot %s holds %d bytes; the workspace has %d MiB of random data", r.snap.ID, r.snap.Bytes, sweepDataMiB)
	}
	// Verified through the balancer, B included: the object and its receipt agree.
	c.MustCLI(t, nil, "snapshot", "verify", r.snap.ID)
	if _, err := c.ClientOf(t, bi).VerifySnapshot(ctx, r.snap.ID); err != nil {
		t.Fatalf("verify through B: %v", err)
	}
	for _, k := range temporaries(ctx, t, c) {
		if k == key {
			t.Fatalf("A's temporary %s is still in the bucket after its snapshot was committed", key)
		}
	}
}

// temporaries lists the controllers' temporaries in the bucket.
func temporaries(ctx context.Context, t *testing.T, c *h.Cluster) []string {
	t.Helper()
	var out []string
	for o := range c.S3.Client().ListObjects(ctx, c.Bucket, minio.ListObjectsOptions{Prefix: h.BlobPrefix + "/.tmp/", Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list the bucket's temporaries: %v", o.Err)
		}
		out = append(out, o.Key)
	}
	return out
}
