package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// checkpointLine is the CHECKPOINT column of workspace ls: the interval in force and when a
// checkpoint last looked at the workspace.
func checkpointLine(w api.Workspace) string {
	if w.CheckpointInterval == 0 {
		return "-"
	}
	line := "every " + time.Duration(w.CheckpointInterval).String()
	if w.LastCheckpointAt != nil {
		line += ", last " + ago(*w.LastCheckpointAt)
	}
	return line
}

func checkpointRows(w api.Workspace) [][2]string {
	every := "off"
	if w.CheckpointInterval != 0 {
		every = time.Duration(w.CheckpointInterval).String()
	}
	if w.CheckpointEvery == nil {
		every += " (the controller's default)"
	}
	rows := [][2]string{{"Checkpoint every", every}}
	if w.LastCheckpointAt != nil {
		rows = append(rows, [2]string{"Last checkpoint", w.LastCheckpointAt.Local().Format(time.RFC3339)})
	}
	return rows
}

func snapshotKind(s api.Snapshot) string {
	if s.Checkpoint {
		return "checkpoint"
	}
	return "snapshot"
}

func newWorkspaceUpdateCmd(c *cli) *cobra.Command {
	var every time.Duration
	var useDefault, asJSON bool
	var idle idleFlags
	cmd := &cobra.Command{
		Use:   "update WS",
		Short: "Change a workspace's settings (its checkpoint interval, its idle policy)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req api.UpdateWorkspaceRequest
			switch {
			case cmd.Flags().Changed("checkpoint-every") && useDefault:
				return usageError{fmt.Errorf("--checkpoint-every and --checkpoint-default exclude each other")}
			case cmd.Flags().Changed("checkpoint-every"):
				d := protocol.Duration(every)
				req.CheckpointEvery = &d
			case useDefault:
				req.CheckpointDefault = true
			}
			if err := idle.request(cmd, &req.IdleStop, &req.IdleClose, "idle-default", "idle-off"); err != nil {
				return err
			}
			req.IdleDefault, _ = cmd.Flags().GetBool("idle-default")
			req.IdleOff, _ = cmd.Flags().GetBool("idle-off")
			if req == (api.UpdateWorkspaceRequest{}) {
				return usageError{fmt.Errorf("nothing to change: pass --checkpoint-every DUR, --checkpoint-default, --idle-stop DUR, --idle-close DUR, --idle-default or --idle-off")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.UpdateWorkspace(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(ws)
			}
			return c.printFields(append(append([][2]string{{"ID", ws.ID}, {"Name", ws.Name}}, checkpointRows(ws)...), idleRows(ws)...))
		},
	}
	cmd.Flags().DurationVar(&every, "checkpoint-every", 0, "take a checkpoint this often; 0 turns checkpoints off")
	cmd.Flags().BoolVar(&useDefault, "checkpoint-default", false, "follow the controller's --checkpoint-every again")
	idle.add(cmd)
	cmd.Flags().Bool("idle-default", false, "follow the controller's --idle-stop/--idle-close again")
	cmd.Flags().Bool("idle-off", false, "no idle action for this workspace, whatever the controller's default")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}

func newWorkspaceForkCmd(c *cli) *cobra.Command {
	var req api.ForkRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork WS",
		Short: "Make N ready workspaces from a fresh checkpoint of WS (all or nothing)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.ForkWorkspace(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "ID\tNAME\tSTATE\tEPOCH\tBRANCH\tFROM\n")
			for _, w := range res.Workspaces {
				branch := "-"
				if w.Git != nil {
					branch = w.Git.Branch
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", w.ID, w.Name, w.State, w.Epoch, branch, res.Snapshot.ID)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&req.Count, "count", 1, "how many workspaces to make")
	cmd.Flags().StringVar(&req.From, "from", "", "fork from this receipt of WS instead of a fresh checkpoint")
	cmd.Flags().StringVar(&req.Provider, "provider", "", "provider of the forks (default: WS's)")
	cmd.Flags().StringVar(&req.NamePrefix, "name-prefix", "", "name the forks PREFIX-1..N (default: WS's name + \"-fork\")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the forks and their receipt as JSON")
	return cmd
}
