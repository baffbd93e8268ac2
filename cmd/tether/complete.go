package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
)

// defaultCompleteTimeout bounds what a shell's Tab waits for the controller: a slow or absent
// one must leave the shell responsive, so completion gives nothing rather than hang.
// TETHER_COMPLETE_TIMEOUT changes it (a controller far away).
const defaultCompleteTimeout = 2 * time.Second

func completeTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TETHER_COMPLETE_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return defaultCompleteTimeout
}

// maxCompleteWorkspaces bounds the workspaces whose snapshots a snapshot id completion lists.
const maxCompleteWorkspaces = 50

// argKind is what a positional argument names, for completion.
type argKind int

const (
	argOther argKind = iota
	argWorkspace
	argSnapshot
	argService // of the workspace named by the argument before it
)

// completedArgs says, per command path, what its positional arguments name. A test checks every
// path here is a command, so a rename cannot leave completion behind silently.
func completedArgs() map[string][]argKind {
	ws := []argKind{argWorkspace}
	wsService := []argKind{argWorkspace, argService}
	snap := []argKind{argSnapshot}
	m := map[string][]argKind{
		"tether exec":         ws,
		"tether port-forward": ws,
		"tether artifact ls":  ws,
		"tether run ls":       ws,
	}
	for _, sub := range []string{"show", "rm", "close", "reopen", "stop", "start", "recover", "events", "export", "inspect", "reconcile", "update", "fork", "pull"} {
		m["tether workspace "+sub] = ws
	}
	for _, sub := range []string{"create", "ls", "prune"} {
		m["tether snapshot "+sub] = ws
	}
	for _, sub := range []string{"show", "restore", "export", "verify", "rm"} {
		m["tether snapshot "+sub] = snap
	}
	m["tether service ls"] = ws
	m["tether service start"] = ws
	for _, sub := range []string{"logs", "stop", "endpoint", "url"} {
		m["tether service "+sub] = wsService
	}
	for _, sub := range []string{"ls", "get", "put", "stat", "mkdir", "rm", "mv", "chmod", "watch"} {
		m["tether files "+sub] = ws
	}
	for _, sub := range []string{"acquire", "renew", "release", "show"} {
		m["tether lease "+sub] = ws
	}
	return m
}

// flagsNamingWorkspaces are flags, by command path, whose value is a workspace.
func flagsNamingWorkspaces() map[string]string {
	return map[string]string{"tether artifact put": "workspace", "tether token create": "workspace", "tether workspace create": "from"}
}

// registerCompletions attaches the completion functions of completedArgs and
// flagsNamingWorkspaces to root's commands.
func registerCompletions(c *cli, root *cobra.Command) {
	args, flags := completedArgs(), flagsNamingWorkspaces()
	walk(root, func(cmd *cobra.Command) {
		if kinds, ok := args[cmd.CommandPath()]; ok {
			cmd.ValidArgsFunction = c.completeArgs(kinds)
		}
		if name, ok := flags[cmd.CommandPath()]; ok {
			_ = cmd.RegisterFlagCompletionFunc(name, func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
				return c.complete(cmd, func(ctx context.Context, cl *client.Client) ([]string, error) {
					return workspaceCompletions(ctx, cl)
				})
			})
		}
	})
}

// completeArgs completes the next positional argument by its kind; past the table's, the
// shell's own (files) — exec's command, put's local file.
func (c *cli) completeArgs(kinds []argKind) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= len(kinds) || kinds[len(args)] == argOther {
			return nil, cobra.ShellCompDirectiveDefault
		}
		switch kinds[len(args)] {
		case argWorkspace:
			return c.complete(cmd, workspaceCompletions)
		case argSnapshot:
			return c.complete(cmd, snapshotCompletions)
		case argService:
			ws := args[len(args)-1]
			return c.complete(cmd, func(ctx context.Context, cl *client.Client) ([]string, error) {
				return serviceCompletions(ctx, cl, ws)
			})
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// complete asks the controller with a short deadline and no retries; any failure completes
// nothing (a shell prints no error in the middle of a command line).
func (c *cli) complete(cmd *cobra.Command, list func(context.Context, *client.Client) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	cl, err := c.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout())
	defer cancel()
	out, err := list(ctx, cl.WithRetryFor(0))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// workspaceCompletions are the live workspaces, by name where they have one (what people type)
// else by id, each with its state as the description.
func workspaceCompletions(ctx context.Context, cl *client.Client) ([]string, error) {
	list, err := cl.ListWorkspaces(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ws := range list {
		key := ws.ID
		if ws.Name != "" && completable(ws.Name) {
			key = ws.Name
		}
		if completable(key) {
			out = append(out, fmt.Sprintf("%s\t%s %s", key, ws.State, ws.Provider))
		}
	}
	return out, nil
}

// snapshotCompletions are the receipts of the live workspaces, newest workspaces' first.
func snapshotCompletions(ctx context.Context, cl *client.Client) ([]string, error) {
	list, err := cl.ListWorkspaces(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, ws := range list {
		if i == maxCompleteWorkspaces || ctx.Err() != nil {
			break
		}
		snaps, err := cl.ListSnapshots(ctx, ws.ID)
		if err != nil {
			continue // one workspace gone meanwhile hides no other's
		}
		label := ws.ID
		if ws.Name != "" && completable(ws.Name) {
			label = ws.Name
		}
		for _, s := range snaps {
			if completable(s.ID) {
				out = append(out, fmt.Sprintf("%s\t%s %s", s.ID, label, s.CreatedAt.Local().Format(time.DateTime)))
			}
		}
	}
	return out, nil
}

func serviceCompletions(ctx context.Context, cl *client.Client, ws string) ([]string, error) {
	list, err := cl.ListServices(ctx, ws)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list {
		if completable(s.Name) {
			out = append(out, fmt.Sprintf("%s\t%s", s.Name, s.State))
		}
	}
	return out, nil
}

// completable keeps out of a shell's completion protocol (one value a line, a tab before the
// description) any name that would break it or the command line: names come from the
// controller, and a workspace may be named by whoever holds a token.
func completable(s string) bool {
	return s != "" && len(s) <= 256 && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
	})
}
