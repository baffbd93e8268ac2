package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/protocol"
)

func newFilesWatchCmd(c *cli) *cobra.Command {
	var asJSON, recursive bool
	cmd := &cobra.Command{
		Use:   "watch ID [PATH]",
		Short: "Stream the changes under a directory (default: the workspace root) until interrupted",
		Long: "Prints one line per change as the runner sees it (inotify): CREATE, WRITE, CHMOD, REMOVE,\n" +
			"RENAME (old -> new). A directory's path ends with \"/\". --recursive also watches every\n" +
			"directory beneath PATH and those made later (what a new directory already held is reported\n" +
			"as created; a create may then be reported twice, never missed). An OVERFLOW line means\n" +
			"changes were lost (too many at once, or too many directories): rescan what you track.\n" +
			"Tether's own temporary files are not shown; a file written through Tether appears as CREATE.\n" +
			"Ctrl-C ends the watch (exit 0). A runner that disconnects ends it with an unavailable error:\n" +
			"changes made while it was away are not replayed.",
		Example: "  tether files watch my-ws src --recursive\n  tether files watch my-ws --json | jq -c 'select(.type==\"write\")'",
		Args:    rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cl, err := c.client()
			if err != nil {
				return err
			}
			dir := "."
			if len(args) == 2 {
				if dir, err = remotePath(ctx, cl, args[0], args[1]); err != nil {
					return err
				}
			}
			w, err := cl.Watch(ctx, args[0], dir, recursive)
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted while starting: nothing was watched, nothing is wrong
				}
				return err
			}
			defer w.Close()
			enc := json.NewEncoder(c.stdout)
			for {
				ev, err := w.Next()
				if err != nil {
					if ctx.Err() != nil {
						return nil // Ctrl-C is how a watch ends
					}
					return err
				}
				if asJSON {
					if err := enc.Encode(ev); err != nil {
						return err
					}
					continue
				}
				c.printf("%s\n", watchLine(ev))
			}
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch every directory beneath PATH too")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event (type, path, old_path, is_dir, time, reason)")
	return cmd
}

// watchLine is an event as the human output shows it: `CREATE  src/a.go`.
func watchLine(ev protocol.WatchEvent) string {
	name := func(p string) string {
		if ev.IsDir {
			p += "/"
		}
		return display(p)
	}
	typ := strings.ToUpper(ev.Type)
	switch ev.Type {
	case protocol.WatchOverflow:
		if ev.Path != "" {
			return fmt.Sprintf("%-7s %s (%s)", typ, display(ev.Path), ev.Reason)
		}
		return fmt.Sprintf("%-7s %s", typ, ev.Reason)
	case protocol.WatchRename:
		return fmt.Sprintf("%-7s %s -> %s", typ, name(ev.OldPath), name(ev.Path))
	}
	return fmt.Sprintf("%-7s %s", typ, name(ev.Path))
}
