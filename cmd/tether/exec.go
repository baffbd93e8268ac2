package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
	"golang.org/x/term"
)

func newExecCmd(c *cli) *cobra.Command {
	var args protocol.ExecArgs
	var timeout time.Duration
	var tty string
	var interactive bool
	cmd := &cobra.Command{
		Use:   "exec ID [-t|--tty[=force]] [-i] [--detach] [--idempotency-key K] [--cwd REL] [--env K=V]... [--timeout DUR] -- CMD [ARG...]",
		Short: "Run a command in a workspace; its exit status becomes tether's",
		Long: `Run a command in a workspace; its exit status becomes tether's.

Without -t, stdin is passed to the command and its stdout and stderr stay apart. With -t the
command runs on a pseudo-terminal of the local terminal's size (which follows resizes, with
TERM passed on); add -i to type into it (the local terminal is put in raw mode). -t needs a
local terminal unless --tty=force.

The run survives its client: if the connection is lost, tether reattaches from where it left
off; if that fails for good, or tether is killed, the run goes on, and 'tether run attach RUN'
or 'tether run logs RUN' pick it up. Ctrl-C (without -t) ends the run (exit 130). --detach
prints the run id and returns at once. A repeat with the same --idempotency-key and command is
the same run, never a second process.`,
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
			switch tty {
			case "", "false", "true", "force":
			default:
				return usageError{fmt.Errorf("--tty=%q: want --tty, --tty=force or --tty=false", tty)}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			args.Argv = a[1:]
			args.Timeout = protocol.Duration(timeout)
			o := client.ExecIO{Stdin: c.stdin, Stdout: c.stdout, Stderr: c.stderr}
			lt := localTerminal(c)
			if tty == "true" || tty == "force" {
				if !lt.ok && tty != "force" {
					return protocol.Errorf(protocol.CodeInvalidArgument, "the input is not a terminal: -t needs one (run it from a terminal, drop -t, or use --tty=force)")
				}
				size := lt.size()
				args.TTY = &size
				if v := os.Getenv("TERM"); v != "" && !hasEnv(args.Env, "TERM") {
					args.Env = append(args.Env, "TERM="+v)
				}
				if !interactive {
					o.Stdin = nil
				}
			}
			if args.Detach {
				o.Stdin = nil
				res, err := cl.ExecRun(cmd.Context(), a[0], args, o)
				if err != nil {
					return err
				}
				c.printf("%s\n", res.RunID)
				return nil
			}
			return c.followRun(cmd.Context(), lt, args.TTY != nil && interactive, o, func(ctx context.Context, o client.ExecIO) (client.RunResult, error) {
				return cl.ExecRun(ctx, a[0], args, o)
			}, timeout)
		},
	}
	cmd.Flags().StringVar(&args.Cwd, "cwd", "", "working directory, relative to the workspace root")
	cmd.Flags().StringArrayVarP(&args.Env, "env", "e", nil, "set an environment variable (KEY=VALUE), repeatable")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command's whole process group after this long")
	cmd.Flags().StringVarP(&tty, "tty", "t", "", "run the command on a pseudo-terminal (--tty=force: even when the local input is not a terminal)")
	cmd.Flags().Lookup("tty").NoOptDefVal = "true"
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "with -t: send the local input to the terminal")
	cmd.Flags().BoolVar(&args.Detach, "detach", false, "start the run, print its id and return; it goes on alone")
	cmd.Flags().StringVar(&args.IdempotencyKey, "idempotency-key", "", "a repeat with this key and the same command is the same run (attached to), never a second process")
	c.addWakeFlag(cmd, false)
	return cmd
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// terminal is the local terminal, when the CLI's input is one.
type terminal struct {
	ok  bool
	in  int // stdin's descriptor
	out int // the descriptor whose size is the window's (stdout when a terminal, else stdin)
}

func localTerminal(c *cli) terminal {
	f, ok := c.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return terminal{}
	}
	t := terminal{ok: true, in: int(f.Fd()), out: int(f.Fd())}
	if o, ok := c.stdout.(*os.File); ok && term.IsTerminal(int(o.Fd())) {
		t.out = int(o.Fd())
	}
	return t
}

// size is the terminal's size, or 24x80 without one.
func (t terminal) size() protocol.WinSize {
	if t.ok {
		if w, h, err := term.GetSize(t.out); err == nil && w > 0 && h > 0 {
			return protocol.WinSize{Rows: uint16(h), Cols: uint16(w)}
		}
	}
	return protocol.WinSize{Rows: 24, Cols: 80}
}

// followRun runs start with the local terminal wired (raw, when raw, and its resizes
// forwarded), prints reattaches, and turns the run's end into tether's exit.
func (c *cli) followRun(ctx context.Context, t terminal, raw bool, o client.ExecIO, start func(context.Context, client.ExecIO) (client.RunResult, error), timeout time.Duration) error {
	nl := "\n"
	if raw && t.ok {
		old, err := term.MakeRaw(t.in)
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer term.Restore(t.in, old)
		nl = "\r\n" // a raw terminal does not turn \n into \r\n
	}
	if t.ok {
		resize := make(chan protocol.WinSize, 1)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-winch:
					select {
					case resize <- t.size():
					default:
					}
				case <-done:
					return
				}
			}
		}()
		o.Resize = resize
	}
	o.Reattaching = func(runID string, err error) {
		fmt.Fprintf(c.stderr, "tether: %v; reattaching to run %s%s", err, runID, nl)
	}
	o.Gap = func(g protocol.LogGap) {
		fmt.Fprintf(c.stderr, "tether: bytes %d-%d of %s are no longer held%s", g.From, g.To, g.Stream, nl)
	}
	res, err := start(ctx, o)
	if err != nil {
		if protocol.CodeOf(err) == protocol.CodeUnavailable && res.RunID != "" && ctx.Err() == nil {
			return protocol.Errorf(protocol.CodeUnavailable, "%s; the run goes on: 'tether run attach %s' reattaches, 'tether run logs %s --follow' reads its output",
				protocol.AsError(err).Message, res.RunID, res.RunID)
		}
		return err
	}
	if ctx.Err() != nil {
		// Interrupted: the command's group was killed; exit like an interrupted shell.
		return ctx.Err()
	}
	exit := res.Exit
	if exit.TimedOut {
		return protocol.Errorf(protocol.CodeTimeout, "command exceeded --timeout %s; its process group was killed", timeout)
	}
	if s := exit.Status(); s != 0 {
		return exitStatus(s)
	}
	return nil
}
