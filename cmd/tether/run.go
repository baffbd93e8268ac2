package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newRunCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "run", Short: "Inspect, follow, signal and wait for the runs of a workspace"}
	var asJSON bool
	ls := &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "List a workspace's runs, oldest first",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			runs, err := cl.ListRuns(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(runs)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tSTATE\tEXIT\tDURATION\tSTARTED\tCOMMAND")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, exitText(r), duration(r), ago(r.StartedAt), strings.Join(r.Argv, " "))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.AddCommand(ls, newRunShowCmd(c), newRunLogsCmd(c), newRunAttachCmd(c), newRunSignalCmd(c), newRunWaitCmd(c))
	return cmd
}

func exitText(r api.Run) string {
	switch {
	case r.Signal > 0:
		return "signal " + strconv.Itoa(r.Signal)
	case r.ExitCode != nil:
		return strconv.Itoa(*r.ExitCode)
	}
	return "-"
}

func duration(r api.Run) string {
	if r.FinishedAt == nil {
		return "-"
	}
	return r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
}
