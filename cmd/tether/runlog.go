package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// logText says how much a run wrote and what its log still holds, per stream.
func logText(o *protocol.RunOutput) string {
	if o == nil {
		return "-"
	}
	held := func(start, end int64) string {
		if start == 0 {
			return fmt.Sprintf("%d bytes (all held)", end)
		}
		return fmt.Sprintf("%d bytes (held: %d-%d)", end, start, end)
	}
	if o.TTY {
		return "terminal " + held(o.StdoutStart, o.StdoutEnd)
	}
	return "stdout " + held(o.StdoutStart, o.StdoutEnd) + ", stderr " + held(o.StderrStart, o.StderrEnd)
}

func newRunLogsCmd(c *cli) *cobra.Command {
	var o client.RunLogsOptions
	var since int64
	cmd := &cobra.Command{
		Use:   "logs RUN [--follow] [--since-offset N] [--stream stdout|stderr]",
		Short: "Print a run's output, while it runs and after; --follow until it ends",
		Long: `Print a run's output from its log on the runner: stdout to stdout, stderr to stderr (a
terminal run has one stream, stdout). Offsets are byte offsets of each stream from the run's
start: --since-offset N starts there (on --stream's stream, or on both). Bytes the log no
longer holds are named on stderr, never skipped silently. A read cut by a controller restart
or a dropped runner connection resumes where it stopped.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.Stream {
			case "", protocol.StreamStdout, protocol.StreamStderr:
			default:
				return usageError{fmt.Errorf("--stream %q: want stdout or stderr", o.Stream)}
			}
			if since < 0 {
				return usageError{fmt.Errorf("--since-offset %d: want a byte offset", since)}
			}
			if o.Stream != protocol.StreamStderr {
				o.StdoutOffset = since
			}
			if o.Stream != protocol.StreamStdout {
				o.StderrOffset = since
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			o.Gap = func(g protocol.LogGap) {
				fmt.Fprintf(c.stderr, "tether: bytes %d-%d of %s are no longer held\n", g.From, g.To, g.Stream)
			}
			_, err = cl.RunLogs(cmd.Context(), args[0], o, c.stdout, c.stderr)
			return err
		},
	}
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "go on printing new output until the run ends")
	cmd.Flags().Int64Var(&since, "since-offset", 0, "start at this byte offset of the stream(s)")
	cmd.Flags().StringVar(&o.Stream, "stream", "", "print only this stream: stdout or stderr")
	return cmd
}

func newRunAttachCmd(c *cli) *cobra.Command {
	var interactive bool
	var offs [2]int64
	cmd := &cobra.Command{
		Use:   "attach RUN [-i] [--stdout-offset N] [--stderr-offset N]",
		Short: "Reconnect to a run: its output from the offsets on, then its exit status",
		Long: `Reconnect to a run: its output from the given offsets (0: from its start), new output as it
comes, and its exit status as tether's. With -i the local input goes to the run (a terminal
run's terminal, in raw mode). Attaching to a finished run prints the rest of its log and exits
with its status. Ctrl-C detaches without ending the run (use 'tether run signal').`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			o := client.ExecIO{Stdout: c.stdout, Stderr: c.stderr, LeaveOnCancel: true}
			lt := localTerminal(c)
			if interactive {
				o.Stdin = c.stdin
			}
			// Ctrl-C leaves the run alone (LeaveOnCancel): it is the attacher that goes.
			return c.followRun(cmd.Context(), lt, interactive && lt.ok, o, func(ctx context.Context, o client.ExecIO) (client.RunResult, error) {
				return cl.AttachRun(ctx, args[0], offs[0], offs[1], o)
			}, 0)
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "send the local input to the run")
	cmd.Flags().Int64Var(&offs[0], "stdout-offset", 0, "start stdout at this byte offset")
	cmd.Flags().Int64Var(&offs[1], "stderr-offset", 0, "start stderr at this byte offset")
	return cmd
}

func newRunSignalCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "signal RUN SIG",
		Short: "Send a signal (TERM, SIGINT, 9, ...) to a running run's process group",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			_, err = cl.SignalRun(cmd.Context(), args[0], args[1])
			return err
		},
	}
}

func newRunWaitCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "wait RUN",
		Short: "Wait until a run ended; its exit status becomes tether's",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			r, err := cl.WaitRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return runStatus(r)
		},
	}
}

// runStatus turns a settled run into tether's exit: its code, 128+signal, or its failure.
func runStatus(r api.Run) error {
	switch {
	case r.ExitCode != nil && *r.ExitCode != 0:
		return exitStatus(*r.ExitCode)
	case r.ExitCode != nil:
		return nil
	case r.Signal > 0:
		return exitStatus(128 + r.Signal)
	case r.State == api.RunLost:
		return protocol.Errorf(protocol.CodeUnavailable, "run %s was lost: %s", r.ID, r.Error)
	}
	return protocol.Errorf(protocol.CodeFailed, "run %s %s: %s", r.ID, r.State, r.Error)
}
