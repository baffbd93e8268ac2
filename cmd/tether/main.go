package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/protocol"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitStatus ends the CLI with a status and no message: exec passes the command's status through.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the CLI and returns its exit status. Errors print as one line,
// `error: <code>: <message>`, and exit with the code's status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	cmd := newRootCmd(c)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "error: %s: interrupted\n", protocol.CodeCanceled)
		return protocol.CodeCanceled.ExitCode()
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		// An error before the command's own code ran is cobra refusing how it was called: an
		// unknown command or flag, a missing required flag, a wrong number of arguments.
		if isUsageError(err) || !c.started {
			pe = protocol.Errorf(protocol.CodeInvalidArgument, "%v", err)
		} else {
			pe = protocol.AsError(err)
		}
	}
	fmt.Fprintf(stderr, "error: %s: %s\n", pe.Code, pe.Message)
	return pe.Code.ExitCode()
}

// usageError marks errors in how the CLI was called.
type usageError struct{ error }

func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

func newRootCmd(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:           "tether",
		Short:         "Run AI agents' work in sandboxes that keep their work",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	// Set before the completion command is made: it keeps the writer it finds then.
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// Cobra runs the nearest PersistentPreRunE only, so no other command may set one (a test
	// walks the tree for that): this one marks that cobra accepted the call.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		c.started = true
		return nil
	}
	c.addGlobalFlags(root)
	root.AddCommand(
		newServeCmd(c),
		newWorkspaceCmd(c),
		newExecCmd(c),
		newRunCmd(c),
		newSnapshotCmd(c),
		newArtifactCmd(c),
		newServiceCmd(c),
		newPortForwardCmd(c),
		newLeaseCmd(c),
		newFilesCmd(c),
		newCpCmd(c),
		newProviderCmd(c),
		newProjectCmd(c),
		newGCCmd(c),
		newStorageCmd(c),
		newTokenCmd(c),
		newDemoCmd(c),
		newVersionCmd(c),
		newContextCmd(c),
		newDocsCmd(c),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	applyConventions(root)
	registerCompletions(c, root)
	return root
}
