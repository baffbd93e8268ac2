package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/tree"
)

func newWorkspaceCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Aliases: []string{"ws"}, Short: "Create, list, show and remove workspaces"}
	cmd.AddCommand(newWorkspaceCreateCmd(c), newWorkspaceLsCmd(c), newWorkspaceShowCmd(c), newWorkspaceRmCmd(c),
		newWorkspaceCloseCmd(c), newWorkspaceReopenCmd(c), newWorkspaceStopCmd(c), newWorkspaceStartCmd(c), newWorkspaceRecoverCmd(c), newWorkspaceEventsCmd(c), newWorkspaceExportCmd(c),
		newWorkspaceInspectCmd(c), newWorkspaceReconcileCmd(c), newWorkspaceUpdateCmd(c), newWorkspaceForkCmd(c),
		newWorkspacePullCmd(c))
	return cmd
}

func newWorkspaceCreateCmd(c *cli) *cobra.Command {
	var req api.CreateWorkspaceRequest
	var source string
	var asJSON bool
	var provOpts []string
	var every, waitTimeout time.Duration
	var idle idleFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a workspace and wait until its runner is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if source != "" && req.Project != "" {
				return usageError{fmt.Errorf("--source and --project exclude each other: a project workspace is a checkout of the project's source")}
			}
			if source != "" && req.FromWorkspace != "" {
				return usageError{fmt.Errorf("--source and --from exclude each other: a child continues its parent's files")}
			}
			if cmd.Flags().Changed("wait-timeout") {
				d := protocol.Duration(waitTimeout)
				req.WaitTimeout = &d
			}
			if source != "" {
				if fi, err := os.Stat(source); err != nil || !fi.IsDir() {
					return protocol.Errorf(protocol.CodeInvalidArgument, "--source %s is not a directory", source)
				}
			}
			if req.Options, err = parseProviderOpts(provOpts); err != nil {
				return err
			}
			if cmd.Flags().Changed("checkpoint-every") {
				d := protocol.Duration(every)
				req.CheckpointEvery = &d
			}
			if err := idle.request(cmd, &req.IdleStop, &req.IdleClose); err != nil {
				return err
			}
			ws, err := cl.CreateWorkspace(cmd.Context(), req)
			if err != nil {
				return err
			}
			if ws.State == api.StateFailed {
				if asJSON {
					_ = c.printJSON(ws)
				}
				code := protocol.CodeProviderFailed
				if ws.Git != nil && !strings.HasPrefix(ws.Reason, "provider ") && !strings.HasPrefix(ws.Reason, "runner ") {
					code = protocol.CodeFailed // the checkout or a provision command failed
				}
				return protocol.Errorf(code, "workspace %s failed: %s", ws.ID, ws.Reason)
			}
			if source != "" {
				bar := c.newProgress("create --source " + display(source))
				if ws, err = importSource(cmd.Context(), cl, ws.ID, source, bar); err != nil {
					// Nothing half-made is left behind: a workspace without its source is not
					// what was asked for.
					_, _ = cl.DeleteWorkspace(context.WithoutCancel(cmd.Context()), ws.ID)
					return err
				}
			}
			if asJSON {
				return c.printJSON(ws)
			}
			c.printf("%s\n", ws.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Provider, "provider", "", "provider plugin (default: the controller's, local)")
	cmd.Flags().StringArrayVar(&provOpts, "provider-opt", nil, "provider option K=V for this workspace's sandbox, repeatable (see tether provider ls)")
	cmd.Flags().StringVar(&req.Name, "name", "", "workspace name (default: its id)")
	cmd.Flags().StringVar(&source, "source", "", "directory to copy into the workspace (a Git checkout included)")
	cmd.Flags().StringVar(&req.Project, "project", "", "make a Git workspace of this project (see tether project)")
	cmd.Flags().StringVar(&req.Mode, "mode", "", "with --project: isolated, shared or operator-branch (default: the project's)")
	cmd.Flags().StringVar(&req.Branch, "branch", "", "with --project: the branch (default tether/NAME when isolated, tether/shared when shared); with --from a project workspace: the child's branch (default tether/NAME)")
	cmd.Flags().StringArrayVar(&req.Provision, "provision", nil, "with --project: a shell command run inside the allocation after the project's; repeatable")
	cmd.Flags().StringArrayVar(&req.Teardown, "teardown", nil, "with --project: a shell command run before release after the project's; repeatable")
	cmd.Flags().DurationVar(&every, "checkpoint-every", 0, "take a checkpoint (a receipt when the tree changed) this often; 0 turns it off (default: the controller's --checkpoint-every)")
	cmd.Flags().StringVar(&req.FromWorkspace, "from", "", "make a child of workspace WS: its own allocation and lease, continuing WS's files (and Git state, on a branch of its own) from WS's last receipt")
	cmd.Flags().StringVar(&req.FromSnapshot, "from-snapshot", "", "with --from: continue from this receipt of WS instead of its last")
	cmd.Flags().BoolVar(&req.WaitForSave, "wait-for-save", false, "with --from: wait, holding nothing, for WS's next receipt (a checkpoint, snapshot or close) and continue from it")
	cmd.Flags().DurationVar(&waitTimeout, "wait-timeout", 0, "with --wait-for-save: how long to wait for WS's next receipt (default 10m, at most 1h)")
	idle.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}

// importSource copies dir into the workspace, a zstd-compressed tar, and then records dir as its
// source, with a receipt of what arrived: the base workspace pull compares the workspace and the
// host with. Its progress (on a terminal, else nil) counts the files' bytes read.
func importSource(ctx context.Context, cl *client.Client, id, dir string, bar *progress) (api.Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return api.Workspace{}, err
	}
	pr, pw := io.Pipe()
	go func() {
		// Sockets and fifos (git's fsmonitor leaves one in .git) have no content to copy.
		pw.CloseWithError(tree.Write(ctx, pw, abs, tree.WriteOptions{Zstd: true, SkipSpecial: true, Progress: bar.add}))
	}()
	_, err = cl.ImportTree(ctx, id, "", pr)
	pr.CloseWithError(err)
	bar.finish()
	if err != nil {
		return api.Workspace{}, err
	}
	return cl.SetSource(ctx, id, abs)
}

func newWorkspaceLsCmd(c *cli) *cobra.Command {
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List workspaces",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListWorkspaces(cmd.Context(), all)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPROVIDER\tSTATE\tRUNNER\tCREATED\tCHECKPOINT")
			for _, w := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Name, w.Provider, w.State, connected(w), ago(w.CreatedAt), checkpointLine(w))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include deleted workspaces")
	return cmd
}

func connected(w api.Workspace) string {
	if w.Connected {
		return "connected"
	}
	return "-"
}

func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

func newWorkspaceShowCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one workspace",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			w, err := cl.GetWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(w)
			}
			if err := c.printFields(append([][2]string{
				{"ID", w.ID}, {"Name", w.Name}, {"Provider", w.Provider}, {"State", string(w.State)},
				{"Reason", w.Reason}, {"Allocation", w.AllocationID}, {"Epoch", fmt.Sprint(w.Epoch)}, {"Root", w.Root},
				{"Runner", connected(w)}, {"Created", w.CreatedAt.Local().Format(time.RFC3339)}, {"Parent", parentLine(w)},
			}, append(append(append(append(checkpointRows(w), idleRows(w)...), usageRows(w)...), gitRows(w)...), sandboxRows(w)...)...)); err != nil {
				return err
			}
			// Services are a best-effort addition: a workspace without any (or an older
			// controller) shows none.
			if svcs, err := cl.ListServices(cmd.Context(), w.ID); err == nil && len(svcs) > 0 {
				c.printf("Services:\n")
				return c.printServices(svcs)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}

func newWorkspaceRmCmd(c *cli) *cobra.Command {
	var asJSON, purge bool
	cmd := &cobra.Command{
		Use:   "rm ID [--purge]",
		Short: "Destroy a workspace's sandbox and delete it (--purge: and remove its receipts)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if purge {
				res, err := cl.PurgeWorkspace(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return c.printJSON(res)
				}
				c.printf("%s\n", res.Workspace.ID)
				fmt.Fprintf(c.stderr, "removed %d receipt(s); the next gc frees what no other receipt needs\n", len(res.Removed))
				return nil
			}
			w, err := cl.DeleteWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(w)
			}
			c.printf("%s\n", w.ID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deleted workspace as JSON")
	cmd.Flags().BoolVar(&purge, "purge", false, "also remove every receipt of the workspace (again on a deleted one: what is left)")
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage-typed error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))}
		}
		return nil
	}
}

// gitRows describe a project workspace's checkout, as recorded (no Git is run to show them).
// sandboxRows are what the provider said of the sandbox (network, limits, isolation), one row
// per key in key order, named as the provider named them.
func sandboxRows(w api.Workspace) [][2]string {
	var rows [][2]string
	for _, k := range slices.Sorted(maps.Keys(w.AllocationInfo)) {
		rows = append(rows, [2]string{k, w.AllocationInfo[k]})
	}
	return rows
}

// usageRows are the latest usage the workspace's runner reported (none before its first report,
// or when it is not connected).
func usageRows(w api.Workspace) [][2]string {
	u := w.Usage
	if u == nil {
		return nil
	}
	return [][2]string{{"CPU", fmt.Sprintf("%.1f%%", u.CPUPercent)}, {"Memory", humanBytes(u.MemoryBytes)},
		{"Disk", humanBytes(u.DiskBytes)}, {"Sampled", u.SampledAt.Local().Format(time.RFC3339)}}
}

// parentLine says where a child came from ("" for a workspace that is no one's child).
func parentLine(w api.Workspace) string {
	if w.Parent == nil {
		return ""
	}
	return w.Parent.Workspace + " at receipt " + w.Parent.Snapshot
}

func gitRows(w api.Workspace) [][2]string {
	if w.Git == nil {
		return nil
	}
	rows := [][2]string{{"Project", w.Git.ProjectID}, {"Mode", w.Git.Mode}, {"Checkout", w.Git.Strategy},
		{"Branch", w.Git.Branch}, {"Base", w.Git.BaseRef + " at " + shortID(w.Git.BaseCommit)}}
	if w.Git.StartCommit != "" {
		rows = append(rows, [2]string{"Started at", shortID(w.Git.StartCommit) + " (the source's " + w.Git.Branch + ")"})
	}
	if w.ReclaimedAt != nil {
		rows = append(rows, [2]string{"Reclaimed", w.ReclaimedAt.Local().Format(time.RFC3339)})
	}
	return rows
}
