package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// demoCheckpointFork shows an automatic checkpoint (a workspace with a short --checkpoint-every,
// a write, the receipt appearing on its own) and a fork of 2 from it.
func demoCheckpointFork(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), repo, prov string) error {
	step("tether workspace create --name demo-cp --checkpoint-every 2s --source %s", repo)
	every := protocol.Duration(2 * time.Second)
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "demo-cp", Provider: prov, CheckpointEvery: &every})
	if err != nil {
		return err
	}
	if ws.State != api.StateReady {
		return protocol.Errorf(protocol.CodeProviderFailed, "workspace %s is %s: %s", ws.ID, ws.State, ws.Reason)
	}
	if _, err := importSource(ctx, cl, ws.ID, repo, nil); err != nil {
		return err
	}
	defer func() {
		for _, name := range []string{"demo-cp-fork-1", "demo-cp-fork-2", "demo-cp"} {
			_, _ = cl.DeleteWorkspace(context.WithoutCancel(ctx), name)
		}
	}()
	// A checkpoint may have come before the write (the interval runs from the creation): the
	// one awaited is the first after it.
	before, err := cl.ListSnapshots(ctx, ws.ID)
	if err != nil {
		return err
	}
	step("tether exec demo-cp -- sh -c 'echo \"saved without asking\" > notes.txt'")
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "echo 'saved without asking' > notes.txt"}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("waiting for the controller's own checkpoint (polling GET /v1/workspaces/demo-cp/snapshots)")
	start := time.Now()
	snap, err := awaitCheckpoint(ctx, cl, ws.ID, len(before), 30*time.Second)
	if err != nil {
		return err
	}
	c.printf("checkpoint %s after %s: %d entries, %s stored\n", snap.ID, time.Since(start).Round(100*time.Millisecond), snap.Entries, humanBytes(snap.Bytes))
	step("tether snapshot ls demo-cp")
	if err := demoCLI("snapshot", "ls", ws.ID); err != nil {
		return err
	}
	step("tether workspace fork demo-cp --count 2")
	if err := demoCLI("workspace", "fork", ws.ID, "--count", "2"); err != nil {
		return err
	}
	step("tether exec demo-cp-fork-2 -- cat notes.txt")
	if _, err := cl.Exec(ctx, "demo-cp-fork-2", protocol.ExecArgs{Argv: []string{"cat", "notes.txt"}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	return demoReclaim(demoCLI, step)
}

// demoReclaim removes the checkpointed workspace and its forks with their receipts, and shows
// gc giving the space back.
func demoReclaim(demoCLI func(...string) error, step func(string, ...any)) error {
	step("tether storage du")
	if err := demoCLI("storage", "du"); err != nil {
		return err
	}
	for _, name := range []string{"demo-cp-fork-1", "demo-cp-fork-2", "demo-cp"} {
		step("tether workspace rm --purge %s", name)
		if err := demoCLI("workspace", "rm", "--purge", name); err != nil {
			return err
		}
	}
	step("tether gc --grace 0s")
	if err := demoCLI("gc", "--grace", "0s"); err != nil {
		return err
	}
	step("tether storage du")
	return demoCLI("storage", "du")
}

// awaitCheckpoint polls the workspace's receipts until a checkpoint appears after the first
// skip receipts.
func awaitCheckpoint(ctx context.Context, cl *client.Client, id string, skip int, within time.Duration) (api.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := cl.ListSnapshots(ctx, id)
		if err != nil {
			return api.Snapshot{}, err
		}
		for _, s := range list[min(skip, len(list)):] {
			if s.Checkpoint {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return api.Snapshot{}, fmt.Errorf("no checkpoint of %s within %s: %w", id, within, ctx.Err())
		case <-tick.C:
		}
	}
}
