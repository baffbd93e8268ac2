package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// pullBack measures `tether workspace pull` of a generated source-like tree (-tree-mib) after
// the workspace changed 1 % of its files, beside `rsync -a` of the workspace's tree onto a copy
// of the host directory as it was (the same change set; rsync compares every file's size and
// mtime, as a user would run it). Both make their writes durable: the pull fsyncs each file it
// publishes, rsync is followed by `sync -f` of its destination. Local provider, so rsync can
// read the workspace's root. Each round changes a new 1 %; the host directory is checked to
// equal the workspace's tree after each pull (untimed).
func (b *bench) pullBack(ctx context.Context) error {
	if _, err := exec.LookPath("rsync"); err != nil {
		progress("pull rows skipped: no rsync")
		b.rep.note("pull rows skipped: no rsync (.ci/deps rsync)")
		return nil
	}
	dir, err := os.MkdirTemp("", "tether-bench-pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	host, ref := filepath.Join(dir, "host"), filepath.Join(dir, "ref")
	progress("pull: generating a %d MiB source-like tree", b.cfg.treeSize>>20)
	ti, err := genTree(ctx, host, b.cfg.treeSize)
	if err != nil {
		return fmt.Errorf("generate the pull tree: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", host, ref).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the reference tree: %v: %s", err, out)
	}
	var out bytes.Buffer
	progress("pull: workspace create --source (%s)", ti)
	if err := b.t.cli(ctx, &out, "workspace", "create", "--provider", "local", "--name", "bench-pull", "--source", host, "--json"); err != nil {
		return err
	}
	var ws api.Workspace
	if err := json.Unmarshal(out.Bytes(), &ws); err != nil {
		return fmt.Errorf("workspace create --json: %w", err)
	}
	b.t.track(ws.ID)
	defer func() {
		if err := b.t.deleteWorkspace(context.WithoutCancel(ctx), ws.ID); err != nil {
			progress("delete workspace %s: %v", ws.ID, err)
		}
	}()
	var pulls, rsyncs []float64
	changedFiles := 0
	for round := 1; round <= b.cfg.rounds; round++ {
		if changedFiles, err = touchOnePercent(ws.Root, round); err != nil {
			return err
		}
		syscall.Sync()
		took, err := timed(func() error { return b.t.cli(ctx, io.Discard, "workspace", "pull", ws.ID) })
		if err != nil {
			return fmt.Errorf("workspace pull: %w", err)
		}
		pulls = append(pulls, float64(took.Microseconds())/1000)
		took, err = timed(func() error {
			cmd := exec.CommandContext(ctx, "sh", "-c", `rsync -a "$1/" "$2/" && sync -f "$2"`, "sh", ws.Root, ref)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("rsync: %v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			return err
		}
		rsyncs = append(rsyncs, float64(took.Microseconds())/1000)
		progress("pull: round %d, %d files changed: pull %v, rsync %v", round, changedFiles, time.Duration(pulls[len(pulls)-1]*1e6), took)
		if err := sameBytes(ws.Root, host); err != nil {
			return fmt.Errorf("after the pull: %w", err)
		}
	}
	b.rep.add(result{Metric: fmt.Sprintf("bring back a %d MiB workspace with 1 %% of its files changed (%d files)", b.cfg.treeSize>>20, changedFiles),
		Unit: unitMS, Tether: val(median(pulls)), N: len(pulls),
		TetherTool: "`tether workspace pull WS` (incremental capture, three-way plan, changed files fetched from the receipt and published through the host guard, fsynced)",
		Reference:  val(median(rsyncs)), RefN: len(rsyncs),
		ReferenceTool: "`rsync -a WSROOT/ COPY/ && sync -f COPY` onto a copy of the host directory (local provider)"})
	b.rep.note("pull row: the tree is %s; each round appends a line to every 100th file in the workspace, then pulls and rsyncs.", ti)
	return nil
}

// sameBytes checks two trees hold the same number of bytes in regular files (a cheap check that
// the pull left nothing behind).
func sameBytes(a, b string) error {
	x, err := treeBytes(a)
	if err != nil {
		return err
	}
	y, err := treeBytes(b)
	if err != nil {
		return err
	}
	if x != y {
		return fmt.Errorf("%s holds %d bytes, %s %d", a, x, b, y)
	}
	return nil
}
