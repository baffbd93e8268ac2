package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// applyConventions gives every command group under root (a command with subcommands and no work
// of its own, root included) the behaviour docker, gh and kubectl share: called alone it prints
// its help and exits 0; called with a word that is none of its subcommands it refuses it as a
// usage error (exit 2) with the nearest names. Cobra's own behaviour differs by level: it prints
// the group's help and exits 0 for `tether workspace lss`, and an untyped error for `tether
// worksapce`.
func applyConventions(root *cobra.Command) {
	walk(root, func(cmd *cobra.Command) {
		if !cmd.HasSubCommands() || cmd.Runnable() {
			return
		}
		cmd.Args = unknownSubcommand
		cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	})
	// A group is runnable now only to print its help: its usage shows "[command]", not a
	// "tether workspace [flags]" line that suggests it does something alone.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
}

// unknownSubcommand refuses any argument to a group: what cobra found no subcommand for.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	// Cobra's distance of 2 makes every two-letter word a neighbour of every other ("rm" would
	// suggest "ls"): short words get a distance of half their length.
	cmd.SuggestionsMinimumDistance = max(1, min(2, len(args[0])/2))
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		quoted := make([]string, len(s))
		for i, name := range s {
			quoted[i] = fmt.Sprintf("%q", name)
		}
		msg += "; did you mean " + strings.Join(quoted, " or ") + "?"
	}
	return usageError{fmt.Errorf("%s (see '%s --help')", msg, cmd.CommandPath())}
}

// walk calls fn on cmd and every command under it, parents first.
func walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, sub := range cmd.Commands() {
		walk(sub, fn)
	}
}
