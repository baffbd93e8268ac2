package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/sandbox/snapshot"
	"github.com/tetherhq/tether/sandbox/tree"
)

const (
	// rssGoal is issue 4's bound on the runner's and the controller's peak RSS during a snapshot.
	rssGoal = 64 << 20
	// snapOpTimeout bounds one capture or restore; a slower one is reported as failed.
	snapOpTimeout = 15 * time.Minute
	zstdRef       = "tar -cf - . | zstd -q -1 -T0"
)

// sizedRounds runs fn up to n times; fn returns the time its operation took and the bytes it
// moved. No round starts once roundBudget has passed.
func sizedRounds(ctx context.Context, n int, fn func(i int) (time.Duration, int64, error)) (rates, error) {
	r := rates{asked: n}
	start := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if i > 0 && time.Since(start) > roundBudget {
			break
		}
		took, size, err := fn(i)
		if err != nil {
			return r, fmt.Errorf("round %d: %w", i+1, err)
		}
		r.mibps = append(r.mibps, mib(size)/took.Seconds())
	}
	return r, nil
}

// snapBench is the state of the snapshot rows.
type snapBench struct {
	*bench
	t     *tetherEnv
	ws    api.Workspace
	tmp   string
	zstd  string // why the zstd references are n/a, or ""
	bytes int64  // content bytes of the tree, as the manifest counts them
	// full is the first capture (no parent: full), fullSecs its time; later rounds are
	// incremental.
	full     api.Snapshot
	fullSecs float64
}

// snapshots captures a generated ~1 GiB source-like tree with CreateSnapshot and restores it
// with RestoreSnapshot, beside tar+zstd on the same tree, on a fresh controller and workspace.
func (b *bench) snapshots(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "tether-bench-snap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	s := &snapBench{bench: b, tmp: tmp, zstd: findZstd(ctx)}
	treeMiB := b.cfg.treeSize >> 20
	src := filepath.Join(tmp, "src")
	progress("snapshot: generating a %d MiB source-like tree with a Git history in %s", treeMiB, src)
	start := time.Now()
	ti, err := genTree(ctx, src, b.cfg.treeSize)
	if err != nil {
		return fmt.Errorf("generate the snapshot tree: %w", err)
	}
	progress("snapshot: generated in %s: %s", time.Since(start).Round(time.Millisecond), ti)

	progress("snapshot: starting a fresh controller and workspace for the snapshot rows")
	if s.t, err = startController(ctx, b.cfg.binDir); err != nil {
		return err
	}
	defer s.t.close()
	if s.ws, _, err = s.t.createWorkspace(ctx, "bench-snapshot"); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	progress("snapshot: importing the tree into the workspace (client ImportTree of tree.Write, as `workspace create --source`)")
	start = time.Now()
	if err := importDir(ctx, s.t, s.ws.ID, src); err != nil {
		return fmt.Errorf("import the snapshot tree: %w", err)
	}
	progress("snapshot: imported in %s", time.Since(start).Round(time.Millisecond))
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if s.ws, err = s.t.cl.GetWorkspace(ctx, s.ws.ID); err != nil {
		return err
	}
	if s.ws.Root == "" {
		return fmt.Errorf("workspace %s reports no root", s.ws.ID)
	}
	if s.bytes, err = treeBytes(s.ws.Root); err != nil {
		return err
	}
	b.rep.note("Snapshot rows: a generated tree (deterministic PRNG) of %s, put into a workspace with the Go client's ImportTree (what `tether workspace create --source` does); the rows run on a fresh controller and workspace. MiB/s are the tree's content bytes (%.0f MiB, the manifest's `bytes`) per second. The reference commands run on the host on the same files, page cache warm (the tree was just written, and the reference reads it once untimed for its size). Every timed round, tether's and the reference's, starts after an untimed sync(2), so none pays for the previous round's writeback. Capture includes the blob store's fsync of the stored object; its first reference writes to /dev/null (the CPU path alone), its second to a file it then syncs. Restore makes the tree durable (syncfs) before it answers, and so does its reference (`&& sync`). Restore on either side creates ~31,000 files, so it moves with the host's file-creation cost, which varies from run to run.",
		ti, mib(s.bytes))
	if s.zstd != "" {
		b.rep.note("Snapshot references are n/a: %s", s.zstd)
	}
	snap, ok := s.capture(ctx)
	if ok {
		s.restore(ctx, snap)
		s.incremental(ctx, s.full, s.fullSecs)
	}
	return ctx.Err()
}

// importDir streams dir as a zstd tar into the workspace root.
func importDir(ctx context.Context, t *tetherEnv, id, dir string) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(tree.Write(ctx, pw, dir, tree.WriteOptions{Zstd: true, SkipSpecial: true}))
	}()
	_, err := t.cl.ImportTree(ctx, id, "", pr)
	pr.CloseWithError(err)
	return err
}

// findZstd returns "" when the zstd CLI is on PATH, installing it with apt-get once if not, and
// otherwise why it is missing.
func findZstd(ctx context.Context) string {
	for _, tool := range []string{"tar", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "no " + tool + " on PATH"
		}
	}
	if _, err := exec.LookPath("zstd"); err == nil {
		return ""
	}
	progress("snapshot: no zstd CLI; trying `apt-get install -y zstd` once")
	out, err := exec.CommandContext(ctx, "apt-get", "install", "-y", "zstd").CombinedOutput()
	if _, lerr := exec.LookPath("zstd"); lerr == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return fmt.Sprintf("no zstd CLI, and `apt-get install -y zstd` failed: %v: %s", err, lines[len(lines)-1])
}

// shell runs script with sh -c in dir, stdout to w (nil: /dev/null), and returns how long it took.
func shell(ctx context.Context, dir string, w io.Writer, script string) (time.Duration, error) {
	took, _, err := shellCPU(ctx, dir, w, script)
	return took, err
}

// shellCPU is shell that also returns the CPU time (user+system) the script and the children
// it waited for used.
func shellCPU(ctx context.Context, dir string, w io.Writer, script string) (took, cpu time.Duration, err error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	took = time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %v: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	return took, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// failed reports a snapshot step that failed: the error in the notes and on stderr, its row n/a.
func (s *snapBench) failed(metric, unit, tool string, err error) {
	progress("snapshot: %s: %v", metric, err)
	s.rep.note("Snapshot %s failed: %v", metric, err)
	s.rep.add(result{Metric: metric, Unit: unit, TetherTool: tool, Note: "failed, see notes"})
}

// capture times CreateSnapshot (each a new receipt) against tar | zstd -1 on the same tree and
// compares archive sizes, with runner and controller RSS watched. It returns the last receipt.
func (s *snapBench) capture(ctx context.Context) (api.Snapshot, bool) {
	n := s.cfg.rounds
	treeMiB := mib(s.bytes)
	runnerPID, err := s.t.runnerPID(s.ws)
	if err != nil {
		s.failed("capture", unitMiBps, "", fmt.Errorf("runner pid: %w", err))
		return api.Snapshot{}, false
	}
	procs := []proc{{"tether-runner", runnerPID}, {"controller (`tether serve`)", s.t.cmd.Process.Pid}}
	progress("snapshot: capture %d × %.0f MiB tree through the Go client CreateSnapshot", n, treeMiB)
	var last api.Snapshot
	var secs []float64
	watch := watchRSS(procs)
	capt, err := sizedRounds(ctx, n, func(int) (time.Duration, int64, error) {
		cctx, cancel := context.WithTimeout(ctx, snapOpTimeout)
		defer cancel()
		syscall.Sync()
		cpu0 := procsCPU(procs)
		start := time.Now()
		// Full: every round reads and stores the whole tree (rounds after the first would
		// otherwise refer to it and read nothing); incremental captures have rows of their own.
		snap, err := s.t.cl.CreateSnapshotWith(cctx, s.ws.ID, api.CaptureOptions{Full: true})
		took := time.Since(start)
		if err != nil {
			return 0, 0, fmt.Errorf("CreateSnapshot after %s: %w", took.Round(time.Millisecond), err)
		}
		if snap.Summary.Bytes != s.bytes {
			return 0, 0, fmt.Errorf("receipt %s counts %d content bytes, the tree on the host has %d", snap.ID, snap.Summary.Bytes, s.bytes)
		}
		progress("snapshot: captured %s in %s: %d entries, archive %.1f MiB; CPU %s", snap.ID, took.Round(time.Millisecond), snap.Entries, mib(snap.Bytes), cpuSpent(procs, cpu0))
		last = snap
		s.full = snap
		secs = append(secs, took.Seconds())
		s.fullSecs = median(secs)
		return took, snap.Summary.Bytes, nil
	})
	watch.end()
	metric := fmt.Sprintf("snapshot capture of a %.0f MiB source-like tree with Git history, %s", treeMiB, capt.label())
	tool := "Go client CreateSnapshot, full (runner tar+zstd → controller → file blob store, fsynced, then the receipt)"
	if err != nil {
		s.failed(metric, unitMiBps, tool, err)
		return api.Snapshot{}, false
	}
	tool += fmt.Sprintf(", median %.2f s", median(secs))

	var ref, refSize *float64
	refTool := fmt.Sprintf("`%s > /dev/null` in the workspace root on the host", zstdRef)
	refNote, sizeNote := "n/a: "+s.zstd, "n/a: "+s.zstd
	var refN int
	if s.zstd == "" {
		refNote, sizeNote = "", ""
		var cw countWriter
		progress("snapshot: reference size: `%s | wc -c` in %s (untimed)", zstdRef, s.ws.Root)
		if _, err := shell(ctx, s.ws.Root, &cw, zstdRef); err != nil {
			s.rep.note("Snapshot reference `%s` failed: %v", zstdRef, err)
			refNote, sizeNote = "failed, see notes", "failed, see notes"
		} else {
			refSize = val(float64(cw.n))
			progress("snapshot: reference capture %d × `%s > /dev/null`", n, zstdRef)
			var refSecs []float64
			r, err := sizedRounds(ctx, n, func(int) (time.Duration, int64, error) {
				syscall.Sync()
				took, err := shell(ctx, s.ws.Root, nil, zstdRef+" > /dev/null")
				if err == nil {
					refSecs = append(refSecs, took.Seconds())
				}
				return took, s.bytes, err
			})
			if err != nil {
				s.rep.note("Snapshot reference `%s > /dev/null` failed: %v", zstdRef, err)
				refNote = "failed, see notes"
			} else {
				ref, refN = val(median(r.mibps)), len(r.mibps)
				refTool += fmt.Sprintf(", %s, median %.2f s", r.label(), median(refSecs))
			}
		}
	}
	s.rep.add(result{Metric: metric, Unit: unitMiBps, Tether: val(median(capt.mibps)), TetherTool: tool, N: len(capt.mibps),
		Reference: ref, ReferenceTool: refTool, RefN: refN, Note: refNote})
	if s.zstd == "" {
		s.persistingRef(ctx, metric, tool, capt)
	}
	s.rep.add(result{Metric: fmt.Sprintf("snapshot archive size of the %.0f MiB tree", treeMiB), Unit: unitBytes,
		Tether: val(float64(last.Bytes)), TetherTool: "receipt `bytes` (stored .tar.zst, zstd fastest, not encrypted)",
		Reference: refSize, ReferenceTool: fmt.Sprintf("`%s | wc -c` on the same tree", zstdRef), Note: sizeNote})
	s.goalRows("capture", fmt.Sprintf("%d rounds", len(capt.mibps)), watch, nil)
	return last, true
}

// persistingRef reports the capture against a reference that, like tether's blob store, keeps
// what it wrote: `tar | zstd > FILE && sync FILE` (the /dev/null row measures the CPU path
// alone).
func (s *snapBench) persistingRef(ctx context.Context, metric, tool string, capt rates) {
	out := filepath.Join(s.tmp, "ref-capture.tar.zst")
	defer os.Remove(out)
	script := fmt.Sprintf("%s > '%s' && sync '%s'", zstdRef, out, out)
	progress("snapshot: persisting reference capture %d × `%s`", s.cfg.rounds, script)
	var secs []float64
	r, err := sizedRounds(ctx, s.cfg.rounds, func(int) (time.Duration, int64, error) {
		os.Remove(out)
		syscall.Sync()
		took, cpu, err := shellCPU(ctx, s.ws.Root, nil, script)
		if err == nil {
			secs = append(secs, took.Seconds())
			progress("snapshot: persisting reference in %s; CPU %.2f s", took.Round(time.Millisecond), cpu.Seconds())
		}
		return took, s.bytes, err
	})
	refTool := fmt.Sprintf("`%s > FILE && sync FILE` in the workspace root on the host", zstdRef)
	res := result{Metric: metric + ", against a persisting reference", Unit: unitMiBps, Tether: val(median(capt.mibps)),
		TetherTool: tool, N: len(capt.mibps), ReferenceTool: refTool}
	if err != nil {
		s.rep.note("Snapshot reference `%s` failed: %v", script, err)
		res.Note = "failed, see notes"
	} else {
		res.Reference, res.RefN = val(median(r.mibps)), len(r.mibps)
		res.ReferenceTool += fmt.Sprintf(", %s, median %.2f s", r.label(), median(secs))
	}
	s.rep.add(res)
}

// restore times RestoreSnapshot onto a new workspace (removed after each round, untimed)
// against `zstd -d < archive | tar -x` of the exported archive into a fresh directory.
func (s *snapBench) restore(ctx context.Context, snap api.Snapshot) {
	n := s.cfg.rounds
	treeMiB := mib(s.bytes)
	head, headErr := gitHead(ctx, s.ws.Root)
	progress("snapshot: restore %d × %s through the Go client RestoreSnapshot", n, snap.ID)
	var runnerPeak float64
	var runnerErrs []string
	var secs []float64
	watch := watchRSS([]proc{{"controller (`tether serve`)", s.t.cmd.Process.Pid}})
	rest, err := sizedRounds(ctx, n, func(i int) (time.Duration, int64, error) {
		cctx, cancel := context.WithTimeout(ctx, snapOpTimeout)
		defer cancel()
		syscall.Sync()
		start := time.Now()
		res, err := s.t.cl.RestoreSnapshot(cctx, snap.ID, api.RestoreRequest{Name: fmt.Sprintf("bench-restore-%d", i), Provider: "local"})
		took := time.Since(start)
		if res.Workspace.ID != "" {
			s.t.track(res.Workspace.ID)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("RestoreSnapshot after %s: %w", took.Round(time.Millisecond), err)
		}
		// The restored runner is a fresh process: its VmHWM is its peak over its whole life.
		if pid, err := s.t.runnerPID(res.Workspace); err != nil {
			runnerErrs = append(runnerErrs, err.Error())
		} else {
			s.t.mu.Lock()
			s.t.runnerPIDs = append(s.t.runnerPIDs, pid)
			s.t.mu.Unlock()
			if v, err := procStatus(pid, "VmHWM"); err != nil {
				runnerErrs = append(runnerErrs, err.Error())
			} else if kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64); err == nil {
				runnerPeak = max(runnerPeak, float64(kb*1024))
			}
		}
		if err := s.checkRestored(ctx, res.Workspace, head, headErr); err != nil {
			return 0, 0, err
		}
		secs = append(secs, took.Seconds())
		delTook, err := timed(func() error { return s.t.deleteWorkspace(ctx, res.Workspace.ID) })
		progress("snapshot: restored into %s in %s (deleted after, untimed, in %s)", res.Workspace.ID, took.Round(time.Millisecond), delTook.Round(time.Millisecond))
		return took, s.bytes, err
	})
	watch.end()
	metric := fmt.Sprintf("snapshot restore of the %.0f MiB tree onto a new workspace, %s", treeMiB, rest.label())
	tool := "Go client RestoreSnapshot (workspace create + runner start + blob store → controller → runner zstd -d + tar -x, verified)"
	if err != nil {
		s.failed(metric, unitMiBps, tool, err)
		return
	}
	tool += fmt.Sprintf(", median %.2f s", median(secs))
	ref, refN, refTool, refNote := s.restoreRef(ctx, snap)
	s.rep.add(result{Metric: metric, Unit: unitMiBps, Tether: val(median(rest.mibps)), TetherTool: tool, N: len(rest.mibps),
		Reference: ref, ReferenceTool: refTool, RefN: refN, Note: refNote})
	for _, e := range runnerErrs {
		s.rep.note("Restored runner's VmHWM: %s", e)
	}
	var rp *float64
	if runnerPeak > 0 {
		rp = val(runnerPeak)
	}
	s.goalRows("restore", fmt.Sprintf("%d rounds", len(rest.mibps)), watch, rp)
	s.forkRow(ctx, snap, median(secs))
}

// checkRestored compares the restored tree's content bytes and Git HEAD with the source's.
func (s *snapBench) checkRestored(ctx context.Context, ws api.Workspace, head string, headErr error) error {
	root := ws.Root
	if root == "" {
		w, err := s.t.cl.GetWorkspace(ctx, ws.ID)
		if err != nil {
			return err
		}
		root = w.Root
	}
	got, err := treeBytes(root)
	if err != nil {
		return fmt.Errorf("restored tree: %w", err)
	}
	if got != s.bytes {
		return fmt.Errorf("restored tree in %s has %d content bytes, the source %d", root, got, s.bytes)
	}
	if headErr != nil {
		return nil
	}
	if h, err := gitHead(ctx, root); err != nil || h != head {
		return fmt.Errorf("restored HEAD %q (%v), the source's %s", h, err, head)
	}
	return nil
}

// restoreRef exports the snapshot (untimed) and times `zstd -d < archive | tar -x -C DIR` into a
// fresh directory each round, removed after (untimed).
func (s *snapBench) restoreRef(ctx context.Context, snap api.Snapshot) (*float64, int, string, string) {
	tool := "`zstd -d < archive.tar.zst | tar -x -C NEWDIR && sync` of the exported snapshot (client ExportSnapshot), on the host"
	if s.zstd != "" {
		return nil, 0, tool, "n/a: " + s.zstd
	}
	fail := func(what string, err error) (*float64, int, string, string) {
		progress("snapshot: %s: %v", what, err)
		s.rep.note("Snapshot restore reference: %s failed: %v", what, err)
		return nil, 0, tool, "failed, see notes"
	}
	archive := filepath.Join(s.tmp, "archive.tar.zst")
	f, err := os.Create(archive)
	if err != nil {
		return fail("create the archive file", err)
	}
	progress("snapshot: exporting %s to %s (untimed)", snap.ID, archive)
	nb, err := s.t.cl.ExportSnapshot(ctx, snap.ID, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail("ExportSnapshot", err)
	}
	if nb != snap.Bytes {
		return fail("ExportSnapshot", fmt.Errorf("exported %d bytes, the receipt says %d", nb, snap.Bytes))
	}
	n := s.cfg.rounds
	progress("snapshot: reference restore %d × `zstd -d < archive | tar -x`", n)
	var secs []float64
	script := fmt.Sprintf("zstd -q -d < '%s' | tar -x -C", archive)
	r, err := sizedRounds(ctx, n, func(i int) (time.Duration, int64, error) {
		dir := filepath.Join(s.tmp, fmt.Sprintf("x%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return 0, 0, err
		}
		defer os.RemoveAll(dir)
		syscall.Sync()
		// sync: tether's restore makes the tree durable (syncfs) before it answers.
		took, err := shell(ctx, s.tmp, nil, script+" '"+dir+"' && sync")
		if err != nil {
			return 0, 0, err
		}
		// The archive's last entry is the manifest, which tar -x writes as a file.
		if err := os.Remove(filepath.Join(dir, snapshot.ManifestName)); err != nil {
			return 0, 0, fmt.Errorf("tar -x wrote no %s: %w", snapshot.ManifestName, err)
		}
		if got, err := treeBytes(dir); err != nil || got != s.bytes {
			return 0, 0, fmt.Errorf("tar -x wrote %d content bytes besides the manifest (%v), want %d", got, err, s.bytes)
		}
		secs = append(secs, took.Seconds())
		progress("snapshot: reference restored into %s in %s", dir, took.Round(time.Millisecond))
		return took, s.bytes, nil
	})
	if err != nil {
		return fail("`zstd -d | tar -x`", err)
	}
	return val(median(r.mibps)), len(r.mibps), tool + fmt.Sprintf(", %s, median %.2f s", r.label(), median(secs)), ""
}

// goalRows reports each watched process's peak RSS against issue 4's 64 MiB goal; extra is the
// restored runner's lifetime VmHWM, if any.
func (s *snapBench) goalRows(op, rounds string, w *rssWatch, extra *float64) {
	for _, e := range w.errs {
		s.rep.note("RSS during snapshot %s: %s", op, e)
	}
	goal := fmt.Sprintf("issue 4's goal: ≤ %d MiB", rssGoal>>20)
	verdict := func(peak float64) string {
		if peak <= rssGoal {
			return "goal met"
		}
		return fmt.Sprintf("goal NOT met: %.2f MiB over", (peak-rssGoal)/(1<<20))
	}
	if op == "restore" {
		tool := "restored tether-runner VmHWM (a fresh process: its lifetime peak), read as each restore returns, max over the rounds"
		note := "n/a"
		if extra != nil {
			note = verdict(*extra)
		}
		s.rep.add(result{Metric: fmt.Sprintf("peak RSS during the snapshot restore (%s)", rounds), Unit: unitBytes,
			Tether: extra, TetherTool: tool, Reference: val(rssGoal), ReferenceTool: goal, Note: note})
	}
	for i, p := range w.procs {
		how := fmt.Sprintf("%d samples every %s", w.samples, rssEvery)
		if w.hwmReset[i] {
			how += " + VmHWM"
		} else {
			how += "; VmHWM could not be reset, samples only"
		}
		s.rep.add(result{Metric: fmt.Sprintf("peak RSS during the snapshot %s (%s)", op, rounds), Unit: unitBytes,
			Tether: val(w.peak[i]), TetherTool: fmt.Sprintf("%s VmRSS (%s)", p.name, how),
			Reference: val(rssGoal), ReferenceTool: goal,
			Note: fmt.Sprintf("%s; VmRSS just before %.2f MiB, increase %+.2f MiB", verdict(w.peak[i]), w.idle[i]/(1<<20), (w.peak[i]-w.idle[i])/(1<<20))})
	}
}
