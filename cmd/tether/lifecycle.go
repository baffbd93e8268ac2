package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
)

func newWorkspaceCloseCmd(c *cli) *cobra.Command {
	var req api.CloseRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "close ID [--check] [--cancel-runs]",
		Short: "Save unsaved work (a verified snapshot) and release the sandbox; --check only reports",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if req.Check {
				var chk api.CloseCheck
				if err := cl.CloseWorkspace(cmd.Context(), args[0], req, &chk); err != nil {
					return err
				}
				if asJSON {
					return c.printJSON(chk)
				}
				c.printf("ready: %v, pending changes: %v, active runs: %d, active services: %d\n", chk.Ready, chk.PendingChanges, chk.ActiveRuns, chk.ActiveServices)
				for _, r := range chk.Reasons {
					c.printf("- %s\n", r)
				}
				return nil
			}
			var res api.CloseResult
			if err := cl.CloseWorkspace(cmd.Context(), args[0], req, &res); err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			if res.StoppedRuns > 0 || res.StoppedServices > 0 {
				c.printf("stopped %d run(s) and %d service(s) before saving\n", res.StoppedRuns, res.StoppedServices)
			}
			if res.Snapshot != nil {
				c.printf("saved %s in %s (%d entries)\n", res.Workspace.ID, res.Snapshot.ID, res.Snapshot.Entries)
			}
			c.printf("%s closed; reopens from %s\n", res.Workspace.ID, firstNonEmpty(res.Saved, "an empty tree"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&req.Check, "check", false, "only report whether it can close and what it would save")
	cmd.Flags().BoolVar(&req.CancelRuns, "cancel-runs", false, "close even with active runs, killing them")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newWorkspaceReopenCmd(c *cli) *cobra.Command {
	var req api.ReopenRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reopen ID [--provider P]",
		Short: "Restore a closed workspace's last snapshot onto a new allocation",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.ReopenWorkspace(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(ws)
			}
			c.printf("%s ready on allocation %s (epoch %d)\n", ws.ID, ws.AllocationID, ws.Epoch)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Provider, "provider", "", "provider of the new allocation (default: the workspace's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}

func newWorkspaceEventsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Every state change of a workspace, with time and cause",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			evs, err := cl.ListEvents(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(evs)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tFROM\tTO\tCAUSE")
			for _, e := range evs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.Local().Format(time.RFC3339), firstNonEmpty(string(e.From), "-"), e.To, e.Cause)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func newRunShowCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "One run: which workspace, which allocation, which writer epoch, how it ended",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			r, err := cl.GetRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(r)
			}
			if err := c.printFields([][2]string{
				{"Run", r.ID}, {"Workspace", r.WorkspaceID}, {"Allocation", r.AllocationID}, {"Epoch", fmt.Sprint(r.Epoch)},
				{"Command", strings.Join(r.Argv, " ")}, {"Kind", r.Kind}, {"State", r.State}, {"Exit", exitText(r)}, {"Error", r.Error},
				{"Started", r.StartedAt.Local().Format(time.RFC3339)}, {"Duration", duration(r)},
				{"Output", logText(r.Log)},
			}); err != nil {
				return err
			}
			if r.Output != "" {
				// Kept for provision and teardown commands: the tail of their stdout and stderr.
				c.printf("Output (last %d bytes kept):\n%s", len(r.Output), r.Output)
				if !strings.HasSuffix(r.Output, "\n") {
					c.printf("\n")
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

func newWorkspaceExportCmd(c *cli) *cobra.Command {
	var req api.ExportRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "export ID --to DIR [--max-bytes N]",
		Short: "Copy the workspace's files out through the provider's file API (when its runner cannot connect)",
		Long: "Copies into DIR on the controller's host. Each file is published whole or not at all; a host\n" +
			"file newer than the sandbox's is left as it is and listed as skipped; a failed copy can be retried.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Dest == "" {
				return usageError{fmt.Errorf("export needs --to DIR")}
			}
			dest, err := filepath.Abs(req.Dest)
			if err != nil {
				return err
			}
			req.Dest = dest
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.ExportFiles(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			c.printf("copied %d files (%s) into %s\n", res.Files, humanBytes(res.Bytes), req.Dest)
			for _, s := range res.Skipped {
				c.printf("kept newer host file %s\n", s)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Dest, "to", "", "directory on the controller's host")
	cmd.Flags().Int64Var(&req.MaxBytes, "max-bytes", 8<<30, "refuse to copy more than this many bytes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newWorkspaceStopCmd(c *cli) *cobra.Command {
	return workspaceVerbCmd(c, "stop WS", "Stop the sandbox and keep it, unsaved work included (no snapshot, no release); start resumes it",
		(*client.Client).StopWorkspace, func(ws api.Workspace) string {
			return fmt.Sprintf("%s stopped; start it with \"tether workspace start %s\"", ws.ID, ws.Name)
		})
}

func newWorkspaceStartCmd(c *cli) *cobra.Command {
	return workspaceVerbCmd(c, "start WS", "Start a stopped workspace's kept sandbox (a new writer epoch)",
		(*client.Client).StartWorkspace, func(ws api.Workspace) string {
			return fmt.Sprintf("%s ready on allocation %s (epoch %d)", ws.ID, ws.AllocationID, ws.Epoch)
		})
}

// workspaceVerbCmd is a command that does one thing to a workspace and prints it: a line said
// by say, or the workspace as JSON.
func workspaceVerbCmd(c *cli, use, short string, do func(*client.Client, context.Context, string) (api.Workspace, error), say func(api.Workspace) string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := do(cl, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(ws)
			}
			c.printf("%s\n", say(ws))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}
