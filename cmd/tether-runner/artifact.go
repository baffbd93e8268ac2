package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tetherhq/tether/runner"
)

// artifactMain is `tether-runner artifact download ARTIFACT_ID DEST [--json]`, the agent-side
// tool: it asks the runner serving this sandbox, over the socket named by TETHER_SOCKET, to
// install an artifact into the workspace.
func artifactMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return runner.ArtifactCommand(ctx, args, os.Getenv, os.Stdout, os.Stderr)
}
