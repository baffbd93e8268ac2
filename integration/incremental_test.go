package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	_ "modernc.org/sqlite"
)

// incrementalSteps change the workspace between captures: deletions, renames, rewrites (same
// size too), mode changes, symlinks, sparse files and Git.
var incrementalSteps = []string{
	`rm untracked.txt`,
	`git mv run.sh tools-run.sh`,
	`printf 'package lib\n\n// v2\n' > lib/code.go`,
	`chmod 600 bin.dat`,
	`ln -s README.md readme-link && rm link`,
	`truncate -s 64M sparse.img && printf 'data' | dd of=sparse.img bs=1 seek=40000000 conv=notrunc 2>/dev/null`,
	`git add -A && git commit -q -m step7`,
	`mkdir -p deep/a/b && echo deep > deep/a/b/c.txt`,
	`mv deep/a deep/z`,
	`printf 'XXXXXXXXXXXXXXXXX' > staged.txt`,
	`chmod 755 deep/z/b/c.txt`,
	`rm -r empty`,
	`for i in $(seq 1 50); do echo "file $i" > many-$i.txt; done`,
	`rm many-1*.txt`,
	`printf 'more' | dd of=sparse.img bs=1 seek=1000 conv=notrunc 2>/dev/null`,
	`git checkout -q -b feature && echo f > feature.txt && git add feature.txt && git commit -q -m feature && git checkout -q main`,
	`git stash -q -u || true`,
	`echo new > "name with space.txt"`,
	`rm -f readme-link && ln -s deep/z readme-link`,
	`git merge -q --ff-only feature && git branch -q -d feature`,
}

func snapshotCreate(t *testing.T, c *controllerProc, ws string) api.Snapshot {
	t.Helper()
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", ws, "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

// A chain of 20 incremental snapshots: each restores exactly (files, modes, links and what git
// says), each exports as a plain archive tar reads, and verify checks every layer.
func TestIncrementalChainRestoresEachSnapshot(t *testing.T) {
	src := gitRepo(t)
	c := startController(t, serveOpts{})
	c.createWorkspace(t, "--source", src, "--name", "chain")
	type point struct {
		snap api.Snapshot
		view string
	}
	var chain []point
	take := func() {
		view := c.mustCLI(t, "exec", "chain", "--", "sh", "-c", gitView)
		chain = append(chain, point{snapshotCreate(t, c, "chain"), view})
	}
	take()
	incremental := 0
	for i, step := range incrementalSteps {
		ident := "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t.invalid GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t.invalid; "
		if r := c.cli(t, nil, "exec", "chain", "--", "sh", "-c", ident+step); r.Code != 0 {
			t.Fatalf("step %d %q: %+v", i, step, r)
		}
		take()
		if s := chain[len(chain)-1].snap; len(s.Layers) > 0 {
			incremental++
			if s.ManifestKey == "" {
				t.Fatalf("incremental receipt without a resolved manifest: %+v", s)
			}
		}
	}
	if incremental < len(incrementalSteps)/2 {
		t.Fatalf("only %d of %d captures were incremental", incremental, len(incrementalSteps))
	}
	for i, p := range chain {
		name := fmt.Sprintf("back-%d", i)
		c.mustCLI(t, "snapshot", "verify", p.snap.ID)
		c.mustCLI(t, "snapshot", "restore", p.snap.ID, "--name", name)
		if got := c.mustCLI(t, "exec", name, "--", "sh", "-c", gitView); got != p.view {
			t.Fatalf("snapshot %d (%d layers) restores differently\nwant:\n%s\ngot:\n%s", i, len(p.snap.Layers), p.view, got)
		}
		c.mustCLI(t, "workspace", "rm", name)
	}
	last := chain[len(chain)-1].snap
	out := filepath.Join(t.TempDir(), "last.tar.zst")
	c.mustCLI(t, "snapshot", "export", last.ID, "-o", out)
	dir := t.TempDir()
	if b, err := exec.Command("sh", "-c", "zstd -q -d < "+out+" | tar -x -C "+dir).CombinedOutput(); err != nil {
		t.Fatalf("zstd -d | tar -x of the export: %v\n%s", err, b)
	}
	if b, err := exec.Command("git", "-C", dir, "log", "--format=%s", "-1").CombinedOutput(); err != nil || string(b) != "feature\n" {
		t.Fatalf("git in the exported tree: %q %v", b, err)
	}
}

// A 1 % change stores at most 5 % of a full capture's bytes; after the parent's receipt row (and
// every earlier one) is gone, the incremental receipt still restores and verifies (its layers
// are objects, not receipts); a damaged layer fails both.
func TestIncrementalStoresLittleAndOutlivesItsParent(t *testing.T) {
	c := startController(t, serveOpts{})
	c.createWorkspace(t, "--name", "big")
	c.mustCLI(t, "exec", "big", "--", "sh", "-c",
		`for i in $(seq 1 100); do head -c 100000 /dev/urandom > f$i.bin; done`)
	full := snapshotCreate(t, c, "big")
	// Files written within the racy window (100 ms) of a capture's start are read again by the
	// next one; captures of the unchanged tree go on until one reads nothing (each takes real
	// time, so the fixture's writes age out of the window).
	settled := false
	for range 5 {
		if s := snapshotCreate(t, c, "big"); len(s.Layers) > 0 && s.Bytes < full.Bytes/100 {
			settled = true
			break
		}
	}
	if !settled {
		t.Fatal("captures of an unchanged tree keep storing its files")
	}
	c.mustCLI(t, "exec", "big", "--", "sh", "-c", `head -c 100000 /dev/urandom > f7.bin`)
	inc := snapshotCreate(t, c, "big")
	if !slices.Contains(inc.Layers, full.ObjectKey) {
		t.Fatalf("the capture after a 1%% change is not an increment over the full one: %+v", inc)
	}
	ratio := float64(inc.Bytes) / float64(full.Bytes)
	if ratio > 0.05 {
		t.Fatalf("a 1%% change stored %d bytes, %.3f of the full %d", inc.Bytes, ratio, full.Bytes)
	}
	t.Logf("a 1%% change stored %d bytes, %.4f of the full capture's %d", inc.Bytes, ratio, full.Bytes)
	want := c.mustCLI(t, "exec", "big", "--", "sh", "-c", "sha256sum f*.bin | sort")

	// --full refers to nothing: every file is stored again (what compacts a chain), and a bad
	// value of the API's parameter changes nothing.
	var again api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "big", "--full", "--json")), &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Layers) != 0 || again.Bytes < full.Bytes*9/10 {
		t.Fatalf("snapshot create --full: layers %v, %d bytes against the first full %d", again.Layers, again.Bytes, full.Bytes)
	}
	before := len(c.snapshots(t, "big"))
	req, err := http.NewRequest(http.MethodPost, c.Addr+"/v1/workspaces/big/snapshots?full=yes", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_argument") {
		t.Fatalf("full=yes: %d %s", resp.StatusCode, body)
	}
	if n := len(c.snapshots(t, "big")); n != before {
		t.Fatalf("full=yes made a receipt: %d receipts, %d before", n, before)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(c.Data, "tether.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Every earlier receipt's row goes, the parent's included: the layers are objects.
	if _, err := db.ExecContext(context.Background(), `DELETE FROM snapshots WHERE workspace_id = ? AND id <> ?`, inc.WorkspaceID, inc.ID); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "snapshot", "restore", inc.ID, "--name", "back")
	if got := c.mustCLI(t, "exec", "back", "--", "sh", "-c", "sha256sum f*.bin | sort"); got != want {
		t.Fatalf("restored after the parent's row was deleted:\n%s\nwant:\n%s", got, want)
	}
	if out := c.mustCLI(t, "snapshot", "verify", inc.ID); !strings.Contains(out, "ok") {
		t.Fatalf("verify: %s", out)
	}

	// A layer damaged in the store fails the incremental receipt's verify and restore.
	layer := filepath.Join(c.Data, "blobs", filepath.FromSlash(full.ObjectKey)) // the chain's base: most files are there
	raw, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(layer, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, nil, "snapshot", "verify", inc.ID); r.Code == 0 || !strings.Contains(r.Stderr, "error: corrupt:") {
		t.Fatalf("verify with a damaged layer: %+v", r)
	}
	if r := c.cli(t, nil, "snapshot", "restore", inc.ID, "--name", "damaged"); r.Code == 0 {
		t.Fatalf("restore with a damaged layer: %+v", r)
	}
}

// A hostile runner's refs: to content the workspace never had, in a capture that was not
// incremental, or with the ref's bytes in the archive too, are corrupt and leave no receipt and
// no object; honest refs from the same fake runner get a receipt.
func TestIncrementalHostileRefs(t *testing.T) {
	h := startHostileRunners(t)
	cl := h.c.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		mode     string
		parented bool // the attack comes in the second capture, once a parent exists
	}{{"ref-unknown", true}, {"ref-with-entry", true}, {"ref-in-full", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			ws := h.workspace(t, tc.mode)
			want := 0
			if tc.parented {
				h.c.mustCLI(t, "snapshot", "create", ws.ID)
				want = 1
			}
			res := h.c.cli(t, nil, "snapshot", "create", ws.ID)
			if res.Code == 0 || !strings.Contains(res.Stderr, "error: corrupt:") {
				t.Fatalf("snapshot create: code %d, stderr %q; want corrupt", res.Code, res.Stderr)
			}
			snaps, err := cl.ListSnapshots(ctx, ws.ID)
			if err != nil || len(snaps) != want {
				t.Fatalf("receipts %v (%v), want %d", snaps, err, want)
			}
			objects, _ := filepath.Glob(filepath.Join(h.c.Data, "blobs", "snapshots", ws.ID, "*"))
			if len(objects) != 2*want {
				t.Fatalf("objects left: %v", objects)
			}
		})
	}
	t.Run("ref-honest", func(t *testing.T) {
		ws := h.workspace(t, "ref-honest")
		h.c.mustCLI(t, "snapshot", "create", ws.ID)
		snap := snapshotCreate(t, h.c, ws.ID)
		if len(snap.Layers) != 1 {
			t.Fatalf("honest refs: %+v", snap)
		}
		h.c.mustCLI(t, "snapshot", "verify", snap.ID)
	})
}

// Encrypted in S3: the layers and the resolved manifest are age-encrypted like the archive, and
// the incremental receipt restores and exports.
func TestIncrementalEncryptedInS3(t *testing.T) {
	s3 := minioFor(t)
	c := startController(t, serveOpts{extraArgs: []string{"--blobs", s3.url}})
	c.createWorkspace(t, "--source", gitRepo(t), "--name", "s3inc")
	c.mustCLI(t, "exec", "s3inc", "--", "sh", "-c", `for i in $(seq 1 20); do echo "file $i" > f$i.txt; done`)
	// Full by request: the workspace already has a receipt (its source base), which an
	// ordinary capture could build on.
	var full api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "s3inc", "--full", "--json")), &full); err != nil || len(full.Layers) != 0 {
		t.Fatalf("snapshot create --full: %+v %v", full, err)
	}
	c.mustCLI(t, "exec", "s3inc", "--", "sh", "-c", `echo changed > f3.txt`)
	inc := snapshotCreate(t, c, "s3inc")
	if len(inc.Layers) != 1 || inc.Layers[0] != full.ObjectKey || !strings.HasSuffix(inc.ManifestKey, ".age") {
		t.Fatalf("not an encrypted increment over the full receipt: %+v", inc)
	}
	if raw := s3.object(t, inc.ManifestKey); !strings.HasPrefix(string(raw), "age-encryption.org/v1") {
		t.Fatal("the resolved manifest is stored in the clear")
	}
	c.mustCLI(t, "snapshot", "verify", inc.ID)
	c.mustCLI(t, "snapshot", "restore", inc.ID, "--name", "back")
	if r := c.cli(t, nil, "exec", "back", "--", "sh", "-c", "cat f3.txt f4.txt && git log --format=%s -1"); r.Code != 0 || r.Stdout != "changed\nfile 4\nunpushed\n" {
		t.Fatalf("restored from S3: %+v", r)
	}
	out := filepath.Join(t.TempDir(), "inc.tar.zst")
	c.mustCLI(t, "snapshot", "export", inc.ID, "-o", out)
	if names := listArchive(t, out); names[len(names)-1] != ".tether-manifest.json" {
		t.Fatal("export of an encrypted incremental snapshot is not the plain archive")
	}
}
