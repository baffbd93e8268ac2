package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newSnapshotRmCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rm SNAP",
		Short: "Remove a receipt (never a live workspace's newest); gc frees its objects",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			snap, err := cl.RemoveSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(snap)
			}
			c.printf("removed %s of workspace %s (%s; the next gc frees what no other receipt needs)\n", snap.ID, snap.WorkspaceID, humanBytes(snap.Bytes))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the removed receipt as JSON")
	return cmd
}

func newSnapshotPruneCmd(c *cli) *cobra.Command {
	var req api.PruneRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune WS [--keep-last N] [--keep-hourly N] [--keep-daily N] [--dry-run]",
		Short: "Remove the receipts a retention policy does not keep (default: the controller's)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := req.Policy
			if p.KeepLast < 0 || p.KeepHourly < 0 || p.KeepDaily < 0 {
				return usageError{fmt.Errorf("--keep-* must not be negative")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.PruneSnapshots(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACTION\tSNAPSHOT\tCREATED\tSIZE\tKEPT BY")
			for _, k := range res.Kept {
				fmt.Fprintf(tw, "keep\t%s\t%s\t%s\t%s\n", k.ID, k.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"), humanBytes(k.Bytes), strings.Join(k.Rules, ","))
			}
			verb := "remove"
			if res.DryRun {
				verb = "would remove"
			}
			for _, r := range res.Removed {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\n", verb, r.ID, r.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"), humanBytes(r.Bytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			c.printf("kept %d, removed %d%s\n", len(res.Kept), len(res.Removed), map[bool]string{true: " (dry run: nothing removed)", false: ""}[res.DryRun])
			return nil
		},
	}
	cmd.Flags().IntVar(&req.Policy.KeepLast, "keep-last", 0, "keep the newest N receipts")
	cmd.Flags().IntVar(&req.Policy.KeepHourly, "keep-hourly", 0, "keep the newest receipt of each of the last N hours that have one (UTC)")
	cmd.Flags().IntVar(&req.Policy.KeepDaily, "keep-daily", 0, "keep the newest receipt of each of the last N days that have one (UTC)")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "print what would be kept and removed, remove nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newStorageCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "storage", Short: "Snapshot storage"}
	var asJSON bool
	du := &cobra.Command{
		Use:   "du",
		Short: "Stored snapshot bytes per workspace, shared, and unreferenced (what gc frees)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			u, err := cl.StorageUsage(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(u)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKSPACE\tNAME\tSTATE\tOBJECTS\tBYTES\tSIZE")
			row := func(id, name, state string, f api.StorageFigure) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", id, firstNonEmpty(name, "-"), firstNonEmpty(state, "-"), f.Objects, f.Bytes, humanBytes(f.Bytes))
			}
			for _, w := range u.Workspaces {
				row(w.WorkspaceID, w.Name, string(w.State), w.StorageFigure)
			}
			row("shared", "", "", u.Shared)
			row("in-flight", "", "", u.InFlight)
			row("unreferenced", "", "", u.Unreferenced)
			row("total", "", "", u.Total)
			return tw.Flush()
		},
	}
	du.Flags().BoolVar(&asJSON, "json", false, "print the usage as JSON")
	cmd.AddCommand(du)
	return cmd
}
