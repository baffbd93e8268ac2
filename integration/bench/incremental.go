package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// Goals of issue 17 for incremental captures.
const (
	incTimeGoal, incTimeMust = 0.10, 0.5
	incBytesGoal             = 0.05
	reopenGoal               = 1.2
	reopenCycles             = 10
)

// touchOnePercent appends a line to every 100th regular file of the tree at root (Git's
// directory aside), in walk order: 1 % of the files.
func touchOnePercent(root string, round int) (int, error) {
	n, changed := 0, 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if n++; n%100 != 0 {
			return nil
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "// changed in round %d\n", round)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		changed++
		return err
	})
	return changed, err
}

// incremental adds the rows of incremental captures: a capture after changing 1 % of the files
// against the full capture (time and new bytes stored), and the bytes stored by 10 close/reopen
// cycles with 1 % changed each against one full snapshot. full is the first capture of the
// tree (no parent, so full), fullSecs its time.
func (s *snapBench) incremental(ctx context.Context, full api.Snapshot, fullSecs float64) {
	metric := "snapshot capture after changing 1 % of the files, ÷ a full capture of the tree"
	changed, err := touchOnePercent(s.ws.Root, 0)
	if err != nil {
		s.failed(metric, "ratio", "", err)
		return
	}
	progress("snapshot: changed %d files (1 %%); capturing incrementally", changed)
	syscall.Sync()
	start := time.Now()
	inc, err := s.t.cl.CreateSnapshot(ctx, s.ws.ID)
	took := time.Since(start)
	if err == nil && len(inc.Layers) == 0 {
		err = fmt.Errorf("receipt %s is not incremental", inc.ID)
	}
	if err != nil {
		s.failed(metric, "ratio", "", err)
		return
	}
	verdict := func(r, goal, must float64) string {
		switch {
		case r <= goal:
			return fmt.Sprintf("goal ≤ %.2f met", goal)
		case must > 0 && r <= must:
			return fmt.Sprintf("goal ≤ %.2f NOT met; must ≤ %.2f met", goal, must)
		}
		return fmt.Sprintf("goal ≤ %.2f NOT met", goal)
	}
	r := took.Seconds() / fullSecs
	s.rep.add(result{Metric: metric + " (time)", Unit: unitMS, Tether: val(took.Seconds() * 1000),
		TetherTool: fmt.Sprintf("CreateSnapshot after %d files changed, %d layers", changed, len(inc.Layers)),
		Reference:  val(fullSecs * 1000), ReferenceTool: "a full CreateSnapshot of the tree (median of the capture rounds)", Note: verdict(r, incTimeGoal, incTimeMust)})
	incStored := inc.Bytes + s.objectSize(inc.ManifestKey)
	fullStored := full.Bytes + s.objectSize(full.ManifestKey)
	rb := float64(incStored) / float64(fullStored)
	s.rep.add(result{Metric: metric + " (new bytes stored)", Unit: unitBytes, Tether: val(float64(incStored)),
		TetherTool: "the incremental receipt's objects (archive and resolved manifest)", Reference: val(float64(fullStored)),
		ReferenceTool: "the full receipt's objects", Note: verdict(rb, incBytesGoal, 0)})
	s.reopenCycles(ctx, full)
}

// reopenCycles closes and reopens the workspace reopenCycles times, changing 1 % of its files
// each time, and reports the bytes all the receipts since the full one store against it.
func (s *snapBench) reopenCycles(ctx context.Context, full api.Snapshot) {
	metric := fmt.Sprintf("%d close/reopen cycles, 1 %% of the files changed each: bytes stored ÷ one full snapshot", reopenCycles)
	fullStored := full.Bytes + s.objectSize(full.ManifestKey)
	stored := fullStored
	for i := range reopenCycles {
		if err := s.t.cl.CloseWorkspace(ctx, s.ws.ID, api.CloseRequest{}, nil); err != nil {
			s.failed(metric, "ratio", "", fmt.Errorf("close %d: %w", i+1, err))
			return
		}
		ws, err := s.t.cl.ReopenWorkspace(ctx, s.ws.ID, api.ReopenRequest{})
		if err == nil && ws.Root == "" {
			err = fmt.Errorf("reopened workspace reports no root")
		}
		if err != nil {
			s.failed(metric, "ratio", "", fmt.Errorf("reopen %d: %w", i+1, err))
			return
		}
		s.ws = ws
		if _, err := touchOnePercent(ws.Root, i+1); err != nil {
			s.failed(metric, "ratio", "", err)
			return
		}
	}
	if err := s.t.cl.CloseWorkspace(ctx, s.ws.ID, api.CloseRequest{}, nil); err != nil {
		s.failed(metric, "ratio", "", err)
		return
	}
	snaps, err := s.t.cl.ListSnapshots(ctx, s.ws.ID)
	if err != nil {
		s.failed(metric, "ratio", "", err)
		return
	}
	var full2 []string
	for _, sn := range snaps {
		if sn.CreatedAt.After(full.CreatedAt) {
			stored += sn.Bytes + s.objectSize(sn.ManifestKey)
			if len(sn.Layers) == 0 {
				full2 = append(full2, sn.ID)
			}
		}
	}
	r := float64(stored) / float64(fullStored)
	note := fmt.Sprintf("goal ≤ %.1f met", reopenGoal)
	if r > reopenGoal {
		note = fmt.Sprintf("goal ≤ %.1f NOT met", reopenGoal)
	}
	if len(full2) > 0 {
		note += "; full captures among them: " + strings.Join(full2, ", ")
	}
	s.rep.add(result{Metric: metric, Unit: unitBytes, Tether: val(float64(stored)),
		TetherTool: fmt.Sprintf("every object of the receipts from the full one on (%d receipts; archives and resolved manifests)", len(snaps)),
		Reference:  val(float64(fullStored)), ReferenceTool: "one full receipt's objects", Note: note})
}

// objectSize is the size of a stored object in the bench controller's file blob store (0 when
// there is no such object: a receipt without a resolved manifest).
func (s *snapBench) objectSize(key string) int64 {
	if key == "" {
		return 0
	}
	fi, err := os.Stat(filepath.Join(s.t.data, "blobs", filepath.FromSlash(key)))
	if err != nil {
		progress("snapshot: size of %s: %v", key, err)
		return 0
	}
	return fi.Size()
}
