package main

import (
	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newWorkspaceRecoverCmd(c *cli) *cobra.Command {
	var req api.RecoverRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "recover ID [--from SNAP] [--note TEXT] [--empty]",
		Short: "Rebuild a lost workspace on a new allocation from its last (or the given) snapshot",
		Long: `Rebuild a lost workspace (its sandbox was destroyed outside Tether while it held unsaved
work) on a fresh allocation of its provider, from its newest snapshot or the one --from names,
which must be one of its own. The decision, with who made it, the snapshot and the note, is
recorded as an event beside the loss; the runs the loss failed stay failed. A workspace with no
snapshot at all is rebuilt only with --empty, from an empty tree.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.RecoverWorkspace(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(ws)
			}
			c.printf("%s recovered: ready on allocation %s (epoch %d)\n", ws.ID, ws.AllocationID, ws.Epoch)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.From, "from", "", "snapshot of this workspace to rebuild from (default: its newest)")
	cmd.Flags().StringVar(&req.Note, "note", "", "a note recorded with the decision")
	cmd.Flags().BoolVar(&req.Empty, "empty", false, "rebuild from an empty tree (only for a workspace with no snapshot)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace as JSON")
	return cmd
}
