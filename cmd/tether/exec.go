package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/protocol"
)

func newExecCmd(c *cli) *cobra.Command {
	var args protocol.ExecArgs
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec ID [--cwd REL] [--env K=V]... [--timeout DUR] -- CMD [ARG...]",
		Short: "Run a command in a workspace; its exit status becomes tether's",
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) < 2 || cmd.ArgsLenAtDash() > 1 {
				return usageError{fmt.Errorf("usage: tether exec ID [flags] -- CMD [ARG...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			for _, kv := range args.Env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
				}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			args.Argv = a[1:]
			args.Timeout = protocol.Duration(timeout)
			exit, err := cl.Exec(cmd.Context(), a[0], args, c.stdin, c.stdout, c.stderr)
			if err != nil {
				return err
			}
			if cmd.Context().Err() != nil {
				// Interrupted: the command's group was killed; exit like an interrupted shell.
				return cmd.Context().Err()
			}
			if exit.TimedOut {
				return protocol.Errorf(protocol.CodeTimeout, "command exceeded --timeout %s; its process group was killed", timeout)
			}
			if s := exit.Status(); s != 0 {
				return exitStatus(s)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&args.Cwd, "cwd", "", "working directory, relative to the workspace root")
	cmd.Flags().StringArrayVarP(&args.Env, "env", "e", nil, "set an environment variable (KEY=VALUE), repeatable")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command's whole process group after this long")
	return cmd
}
