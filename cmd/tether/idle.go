package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// addWakeFlag gives cmd (and, persistent, its subcommands) --wake.
func (c *cli) addWakeFlag(cmd *cobra.Command, persistent bool) {
	fs := cmd.Flags()
	if persistent {
		fs = cmd.PersistentFlags()
	}
	fs.BoolVar(&c.wake, "wake", false, "start a stopped workspace, or reopen a closed one, before the call (default: refused, unless the controller runs with --wake-on-use)")
}

// idleFlags are --idle-stop and --idle-close, which exclude each other.
type idleFlags struct {
	stop, close time.Duration
}

func (f *idleFlags) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.stop, "idle-stop", 0, "stop the workspace (keeping its sandbox) after this long without runs, service connections or file operations (at least 1m)")
	cmd.Flags().DurationVar(&f.close, "idle-close", 0, "close the workspace (save and release) after this long without activity (at least 1m)")
}

// request fills the durations given into stop and close; the flags named in others (bool flags)
// exclude them and each other.
func (f *idleFlags) request(cmd *cobra.Command, stop, close **protocol.Duration, others ...string) error {
	var set []string
	for _, name := range append([]string{"idle-stop", "idle-close"}, others...) {
		if cmd.Flags().Changed(name) {
			set = append(set, "--"+name)
		}
	}
	if len(set) > 1 {
		return usageError{fmt.Errorf("%s exclude each other", strings.Join(set, " and "))}
	}
	if cmd.Flags().Changed("idle-stop") {
		d := protocol.Duration(f.stop)
		*stop = &d
	}
	if cmd.Flags().Changed("idle-close") {
		d := protocol.Duration(f.close)
		*close = &d
	}
	return nil
}

// idleRows are workspace show's lines about the idle policy in force and the last activity.
func idleRows(w api.Workspace) [][2]string {
	policy := "off"
	if w.Idle != nil {
		policy = fmt.Sprintf("%s after %s", w.Idle.Action, time.Duration(w.Idle.After))
	}
	if w.IdlePolicy == nil {
		policy += " (the controller's default)"
	}
	rows := [][2]string{{"Idle", policy}}
	if w.LastActivityAt != nil {
		rows = append(rows, [2]string{"Last activity", w.LastActivityAt.Local().Format(time.RFC3339)})
	}
	return rows
}
