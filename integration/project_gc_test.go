package integration

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

func (c *controllerProc) gc(t *testing.T, args ...string) api.GCResult {
	t.Helper()
	var res api.GCResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, append([]string{"gc", "--json"}, args...)...)), &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func candidate(res api.GCResult, id string) *api.GCCandidate {
	for i := range res.Candidates {
		if res.Candidates[i].WorkspaceID == id {
			return &res.Candidates[i]
		}
	}
	return nil
}

// A closed workspace whose work is in a verified receipt is reclaimable after the grace; a
// reclaim frees its superseded receipts (and the base clone no open workspace uses), and a
// reopen afterwards restores the exact commit and files, though the upstream moved on.
func TestProjectGCAndReopenAfterUpstreamAdvanced(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	ws := c.createWorkspace(t, "--project", p.ID, "--name", "gc-me")
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo committed > work.txt")
	c.wsGit(t, ws.ID, "add", "work.txt")
	c.wsGit(t, ws.ID, "commit", "-q", "-m", "work")
	first := c.snapshot(t, ws.ID)
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo uncommitted >> work.txt; echo untracked > new.txt")
	head := c.wsGit(t, ws.ID, "rev-parse", "HEAD")
	want := c.listing(t, ws.ID)
	c.mustCLI(t, "workspace", "close", ws.ID)

	if cand := candidate(c.gc(t, "--grace", "1h", "--dry-run"), ws.ID); cand != nil {
		t.Fatalf("a workspace closed within the grace is a candidate: %+v", cand)
	}
	// What a reclaim frees: the superseded receipt's objects its successor does not read (the
	// close capture is incremental: unchanged files are refs into the first receipt's archive).
	var closed []api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "ls", ws.ID, "--json")), &closed); err != nil || len(closed) != 2 {
		t.Fatalf("receipts after close: %+v %v", closed, err)
	}
	var frees int64
	var kept []string
	for _, key := range []string{first.ObjectKey, first.ManifestKey} {
		if slices.Contains(closed[1].Layers, key) {
			kept = append(kept, key)
			continue
		}
		fi, err := os.Stat(filepath.Join(c.Data, "blobs", filepath.FromSlash(key)))
		if err != nil {
			t.Fatal(err)
		}
		frees += fi.Size()
	}
	dry := c.gc(t, "--grace", "0s", "--dry-run")
	cand := candidate(dry, ws.ID)
	if cand == nil || !cand.Reclaimable || cand.Reclaimed || cand.Bytes != frees || !dry.DryRun {
		t.Fatalf("dry run: %+v; want %d bytes", dry, frees)
	}
	if _, err := os.Stat(filepath.Join(c.Data, "blobs")); err != nil {
		t.Fatal(err)
	}
	var snaps []api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "ls", ws.ID, "--json")), &snaps); err != nil || len(snaps) != 2 || snaps[0].ReclaimedAt != nil {
		t.Fatalf("receipts after a dry run: %+v %v", snaps, err)
	}

	res := c.gc(t, "--grace", "0s")
	if cand := candidate(res, ws.ID); cand == nil || !cand.Reclaimed || cand.Bytes != frees {
		t.Fatalf("sweep: %+v; want %d bytes of the workspace's", res, frees)
	}
	for _, key := range kept {
		if _, err := os.Stat(filepath.Join(c.Data, "blobs", filepath.FromSlash(key))); err != nil {
			t.Fatalf("a layer the newest receipt reads went with the reclaim: %s: %v", key, err)
		}
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "ls", ws.ID, "--json")), &snaps); err != nil || snaps[0].ReclaimedAt == nil || snaps[1].ReclaimedAt != nil {
		t.Fatalf("receipts after the sweep: %+v %v", snaps, err)
	}
	if _, err := os.Stat(filepath.Join(c.Data, "projects", p.ID, "base.git")); !os.IsNotExist(err) {
		t.Fatalf("the base clone no open workspace uses was kept: %v", err)
	}
	if again := c.gc(t, "--grace", "0s"); again.Bytes != 0 {
		t.Fatalf("a second sweep reclaimed more: %+v", again)
	}
	if r := c.cli(t, nil, "snapshot", "verify", first.ID); r.Code != 3 || !strings.Contains(r.Stderr, "reclaimed") {
		t.Fatalf("verify of a reclaimed receipt: %+v", r)
	}

	src.advance("upstream.txt", "moved on\n")
	c.mustCLI(t, "workspace", "reopen", ws.ID)
	if got := c.wsGit(t, ws.ID, "rev-parse", "HEAD"); got != head {
		t.Fatalf("reopened at %s, want %s", got, head)
	}
	if got := c.listing(t, ws.ID); got != want {
		t.Fatalf("reopened tree differs:\n got %s\nwant %s", got, want)
	}
	if in := c.inspect(t, ws.ID); in.Delivery != api.Unmerged || in.Head != head || in.Unstaged != 1 || in.Untracked != 1 {
		t.Fatalf("inspect after reopen: %+v", in)
	}
	// Reopened from its receipt the repository stands alone: reconcile brings the base's new
	// objects as a pack, and with local work on both sides reports, never rewrites.
	var rec api.ReconcileResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", ws.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "diverged" || rec.Ahead != 1 || rec.Behind != 1 || rec.After != head {
		t.Fatalf("reconcile after reopen: %+v", rec)
	}
}

// On Docker the checkout is built inside the container from a pack the controller streams
// through the runner (the image has no git), and provision commands run in the container.
func TestDockerProjectWorkspace(t *testing.T) {
	cli := dockerEngine(t)
	src := newSourceRepo(t)
	src.git("checkout", "-q", "-b", "feature")
	featureTip := src.advance("feature.txt", "feature\n")
	src.git("checkout", "-q", "main")
	c := startDockerController(t, cli)
	p := c.createProject(t, "--source", src.Dir)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	marker := "/tmp/tether-provisioned-" + hex.EncodeToString(b)
	ws := c.createOn(t, "docker", "--project", p.ID, "--provision", "touch "+marker+" && echo in-the-sandbox")
	if ws.Git == nil || ws.Git.Strategy != api.StrategyClone {
		t.Fatalf("docker workspace: %+v", ws.Git)
	}
	if got := c.mustCLI(t, "files", "get", ws.ID, "README"); got != "v1\n" {
		t.Fatalf("README = %q", got)
	}
	c.mustCLI(t, "exec", ws.ID, "--", "ls", marker)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the provision command ran on the host: %v", err)
	}
	in := c.inspect(t, ws.ID)
	if in.Head != ws.Git.BaseCommit || in.Branch != "tether/"+ws.Name || in.Delivery != api.DeliveredByAncestry || in.Staged+in.Unstaged+in.Untracked != 0 {
		t.Fatalf("inspect: %+v", in)
	}
	newBase := src.advance("later.txt", "later\n")
	var rec api.ReconcileResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", ws.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "fast_forwarded" || rec.After != newBase {
		t.Fatalf("reconcile: %+v", rec)
	}
	if got := c.mustCLI(t, "exec", ws.ID, "--", "cat", "later.txt"); !strings.Contains(got, "later") {
		t.Fatalf("later.txt = %q", got)
	}

	// A branch the source has is cloned at its tip there, its objects in the streamed pack.
	fw := c.createOn(t, "docker", "--project", p.ID, "--mode", "operator-branch", "--branch", "feature")
	if in := c.inspect(t, fw.ID); in.Head != featureTip || in.Branch != "feature" || in.Ahead != 1 {
		t.Fatalf("inspect of the feature workspace: %+v", in)
	}
	if got := c.mustCLI(t, "exec", fw.ID, "--", "cat", "feature.txt"); got != "feature\n" {
		t.Fatalf("feature.txt = %q", got)
	}
}
