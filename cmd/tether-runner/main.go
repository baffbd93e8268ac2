package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/runner"
	"github.com/tetherhq/tether/sandbox/confine"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == confine.InitArg {
		os.Exit(confine.Init(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == protocol.ConfineProbeArg {
		os.Exit(probeMain())
	}
	if len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println("tether-runner", version)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "artifact" {
		os.Exit(artifactMain(os.Args[2:]))
	}
	// Take the token out of the environment before anything can be started: commands the runner
	// executes must never see it.
	token := os.Getenv(protocol.EnvRunnerToken)
	os.Unsetenv(protocol.EnvRunnerToken)

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	flags := flag.NewFlagSet("tether-runner", flag.ContinueOnError)
	runLogMax := flags.Int64("run-log-max-bytes", 0, "output kept per run, oldest dropped first (0: 128 MiB)")
	runLogsMax := flags.Int64("run-logs-max-bytes", 0, "output kept for all runs together, finished runs' oldest first (0: 1 GiB)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	root := os.Getenv(protocol.EnvWorkspaceRoot)
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			log.Error("no workspace root", "err", err)
			os.Exit(2)
		}
		root = wd
	}
	policy, err := policyFromEnv(os.Getenv)
	if err != nil {
		log.Error("cannot start", "err", err)
		os.Exit(2)
	}
	// Private state (the capture cache) lives outside the workspace, in a directory of the
	// runner's own that no confined command sees; losing it only makes the next capture full.
	stateDir, err := os.MkdirTemp("", "tether-runner-state-")
	if err != nil {
		log.Warn("no state directory: every capture is full", "err", err)
		stateDir = ""
	} else {
		defer os.RemoveAll(stateDir)
	}
	r, err := runner.New(runner.Config{
		StateDir:        stateDir,
		RunLogMaxBytes:  *runLogMax,
		RunLogsMaxBytes: *runLogsMax,
		Confine:         policy,
		UsageSource:     os.Getenv(protocol.EnvUsageSource),
		ControllerURL:   os.Getenv(protocol.EnvControllerURL),
		Token:           token,
		AllocationID:    os.Getenv(protocol.EnvAllocationID),
		Root:            root,
		Version:         version,
		Env:             withSelfOnPath(os.Environ()),
		Logger:          log,
	})
	if err != nil {
		log.Error("cannot start", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = r.Run(ctx)
	// Stopping the runner stops the work it started: a stopped allocation runs nothing.
	r.Shutdown()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("runner stopped", "err", err)
		os.Exit(1)
	}
	log.Info("runner stopped")
}

// withSelfOnPath puts the runner's own directory first on the PATH commands get, so agents can
// call `tether-runner artifact download` whichever provider placed the binary wherever.
func withSelfOnPath(env []string) []string {
	exe, err := os.Executable()
	if err != nil {
		return env
	}
	dir := filepath.Dir(exe)
	out := make([]string, 0, len(env)+1)
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
			continue
		}
		out = append(out, kv)
	}
	for _, p := range filepath.SplitList(path) {
		if p == dir {
			return append(out, "PATH="+path)
		}
	}
	path = dir + string(filepath.ListSeparator) + path
	// exec resolves a bare command name with the runner's own PATH, so it must match.
	_ = os.Setenv("PATH", path)
	return append(out, "PATH="+path)
}

// policyFromEnv reads how the provider asked the runner to confine the agent.
func policyFromEnv(getenv func(string) string) (confine.Policy, error) {
	p := confine.Policy{Mode: getenv(protocol.EnvIsolation), StateDir: getenv(protocol.EnvSandboxDir), UID: -1, GID: -1}
	for _, id := range []struct {
		env string
		dst *int
	}{{protocol.EnvAgentUID, &p.UID}, {protocol.EnvAgentGID, &p.GID}} {
		v := getenv(id.env)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return confine.Policy{}, fmt.Errorf("%s=%q is not a numeric id", id.env, v)
		}
		*id.dst = n
	}
	return p, nil
}

// probeMain confines a command as the environment asks, for a provider checking the host.
func probeMain() int {
	p, err := policyFromEnv(os.Getenv)
	if err == nil {
		p.Workspace = os.Getenv(protocol.EnvWorkspaceRoot)
		err = confine.Probe(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tether-runner:", err)
		return 1
	}
	return 0
}
