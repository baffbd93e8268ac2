package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/protocol"
)

func newProjectCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Create, list and show projects: Git sources and how their tasks get checkouts"}
	cmd.AddCommand(newProjectCreateCmd(c), newProjectLsCmd(c), newProjectShowCmd(c))
	return cmd
}

func newProjectCreateCmd(c *cli) *cobra.Command {
	var req api.CreateProjectRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create --source REPO_PATH_OR_URL [--base-ref main] [--mode isolated|shared|operator-branch] [--provision CMD]...",
		Short: "Record a project: the controller clones its source into a managed base clone first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Source == "" {
				return usageError{fmt.Errorf("--source is required")}
			}
			if gitsource.IsLocal(req.Source) && !strings.HasPrefix(req.Source, "file://") {
				// The controller resolves nothing relative to its own directory: send an
				// absolute path, as the user meant it from here.
				abs, err := filepath.Abs(req.Source)
				if err != nil {
					return err
				}
				req.Source = abs
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := cl.CreateProject(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(p)
			}
			c.printf("%s\n", p.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Source, "source", "", "the Git repository: a path on the controller's host or a URL")
	f.StringVar(&req.Name, "name", "", "project name (default: the source's base name)")
	f.StringVar(&req.BaseRef, "base-ref", "", "the branch workspaces start from and deliver to (default: the source's HEAD branch)")
	f.StringVar(&req.Mode, "mode", "", "isolated (default: a workspace and branch per request), shared or operator-branch (one workspace per branch, reused)")
	f.StringArrayVar(&req.Provision, "provision", nil, "shell command run inside each new allocation after the checkout, before ready; repeatable")
	f.StringArrayVar(&req.Teardown, "teardown", nil, "shell command run inside the allocation before it is released; repeatable")
	f.BoolVar(&asJSON, "json", false, "print the project as JSON")
	return cmd
}

func newProjectLsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List projects",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListProjects(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tMODE\tBASE\tSOURCE\tCREATED")
			for _, p := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, p.Mode, p.BaseRef, p.Source, ago(p.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the projects as JSON")
	return cmd
}

func newProjectShowCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one project",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := cl.GetProject(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(p)
			}
			return c.printFields([][2]string{
				{"ID", p.ID}, {"Name", p.Name}, {"Source", p.Source}, {"Base ref", p.BaseRef}, {"Mode", p.Mode},
				{"Provision", strings.Join(p.Provision, "\n\t")}, {"Teardown", strings.Join(p.Teardown, "\n\t")},
				{"Created", p.CreatedAt.Local().Format(time.RFC3339)},
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the project as JSON")
	return cmd
}

func newWorkspaceInspectCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Compute a project workspace's Git state and whether its work is delivered (fetches the base ref from the source)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			in, err := cl.InspectWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(in)
			}
			return c.printFields([][2]string{
				{"Head", in.Head}, {"Branch", in.Branch}, {"Read from", in.Source},
				{"Base", fmt.Sprintf("%s at %s", in.BaseRef, shortID(in.BaseCommit))},
				{"Ahead/behind", fmt.Sprintf("%d/%d", in.Ahead, in.Behind)},
				{"Changes", fmt.Sprintf("%d staged, %d unstaged, %d untracked", in.Staged, in.Unstaged, in.Untracked)},
				{"Delivery", in.Delivery}, {"Reason", in.Reason},
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the inspection as JSON")
	return cmd
}

func newWorkspaceReconcileCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reconcile ID",
		Short: "Fetch the base ref from the source into the workspace and fast-forward a clean branch (never drops commits)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.ReconcileWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			c.printf("%s: %s at %s; ahead %d, behind %d; HEAD %s -> %s\n", res.Action, res.BaseRef, shortID(res.BaseCommit),
				res.Ahead, res.Behind, shortID(res.Before), shortID(res.After))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func shortID(s string) string { return s[:min(len(s), 12)] }

func newGCCmd(c *cli) *cobra.Command {
	var grace time.Duration
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "gc [--grace 24h] [--dry-run]",
		Short: "Reclaim storage: snapshot objects no receipt needs, and closed workspaces' superseded receipts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usageError{fmt.Errorf("--grace must not be negative")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.GC(cmd.Context(), api.GCRequest{Grace: ptr(protocol.Duration(grace)), DryRun: dryRun})
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKSPACE\tNAME\tRECLAIMABLE\tBYTES\tRECLAIMED\tWHY")
			for _, cand := range res.Candidates {
				fmt.Fprintf(tw, "%s\t%s\t%t\t%d\t%t\t%s\n", firstNonEmpty(cand.WorkspaceID, "-"), cand.Name, cand.Reclaimable, cand.Bytes, cand.Reclaimed, cand.Why)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, p := range res.Pruned {
				c.printf("retention: workspace %s: removed %d receipt(s), kept %d\n", p.WorkspaceID, len(p.Removed), len(p.Kept))
			}
			if dryRun {
				c.printf("dry run: nothing reclaimed; %d snapshot object(s) (%d bytes) no receipt needs\n", res.Objects.Objects, res.Objects.Bytes)
			} else {
				c.printf("deleted %d snapshot object(s) no receipt needs (%d bytes)\n", res.Objects.Objects, res.Objects.Bytes)
				c.printf("reclaimed %d bytes\n", res.Bytes)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 24*time.Hour, "only workspaces closed, and objects without a receipt stored, at least this long ago (pinned objects are kept whatever it is)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list candidates and bytes, reclaim nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sweep as JSON")
	return cmd
}

func ptr[T any](v T) *T { return &v }
