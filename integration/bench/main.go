// Command bench measures Tether's runner, exec path and file transfers against Docker measured in
// the same run, its snapshots against tar and zstd on the same tree, and its Git project
// workspaces against git clone (and docker cp) of the same repository, and what a cluster of
// controllers behind HAProxy adds to a request (against one controller called directly) and how
// long a failover takes, and what reaching a service in a workspace through the controller's
// HTTP proxy and port-forward costs (against the same server reached directly), and prints a Markdown table (or JSON) of the figures and their ratios.
// `make bench` runs it with TETHER_BIN_DIR pointing at freshly built binaries. It asserts
// nothing about timings.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

type config struct {
	binDir   string
	n        int   // exec round trips through Go clients
	cliN     int   // exec round trips through CLIs (a process each)
	starts   int   // workspace / container starts
	rounds   int   // throughput rounds
	size     int64 // throughput bytes
	fileSize int64 // file get/put bytes
	b64Size  int64 // base64-over-exec file bytes
	treeSize int64 // bytes of the generated snapshot tree
	cpSize   int64 // bytes of the generated tree `tether cp` copies
	projSize int64 // committed bytes of the generated project repository
	asJSON   bool
	noDocker bool
	noSnap   bool
	noDProv  bool // skip the Docker provider rows
	noProj   bool // skip the project workspace rows
	noClust  bool // skip the cluster rows
	noReach  bool // skip the reach rows (proxy and port-forward beside direct)
	// clusterFileSize is the file the cluster rows get; failovers how many times they kill the
	// runner's owner.
	clusterFileSize int64
	failovers       int
	// only, when not empty, names the steps to run (starts, execs, isolation, throughput, rss,
	// files, snapshot, dockerprovider, project, cluster, reach): iterating on one path need not wait
	// for the others.
	only map[string]bool
}

func main() {
	var cfg config
	var mib, fileMiB, b64MiB, treeMiB, projMiB, clusterMiB, cpMiB int64
	flag.IntVar(&cfg.n, "n", 200, "exec round trips through the Go client and the Engine API")
	flag.IntVar(&cfg.cliN, "cli-n", 50, "exec round trips through the tether and docker CLIs")
	flag.IntVar(&cfg.starts, "starts", 10, "workspace and container starts")
	flag.IntVar(&cfg.rounds, "rounds", 3, "throughput rounds (the median is reported)")
	flag.Int64Var(&mib, "mib", 50, "MiB of exec output per throughput round")
	flag.Int64Var(&fileMiB, "file-mib", 1024, "MiB of the file got and put through the Go client")
	flag.Int64Var(&b64MiB, "b64-mib", 64, "MiB of the file got and put as base64 over exec in 192 KiB chunks")
	flag.Int64Var(&treeMiB, "tree-mib", 1024, "MiB of the generated source-like tree that is snapshotted and restored")
	flag.Int64Var(&cpMiB, "cp-mib", 64, "MiB of the generated source-like tree copied in and out with `tether cp` and `docker cp`")
	flag.Int64Var(&projMiB, "project-mib", 32, "MiB committed in the generated Git repository that project workspaces check out")
	flag.BoolVar(&cfg.noSnap, "no-snapshot", false, "skip the snapshot capture and restore rows")
	flag.BoolVar(&cfg.noProj, "no-project", false, "skip the Git project rows (project create, and isolated project workspaces on the local and Docker providers)")
	flag.BoolVar(&cfg.noDProv, "no-docker-provider", false, "skip the Docker provider rows (workspace start and 256 MiB file transfer in a container)")
	flag.BoolVar(&cfg.noClust, "no-cluster", false, "skip the cluster rows (controllers on PostgreSQL and MinIO behind HAProxy, each in a network namespace: needs root, haproxy, PostgreSQL and MinIO)")
	flag.BoolVar(&cfg.noReach, "no-reach", false, "skip the reach rows (small GETs and a 256 MiB GET of a devserver in a workspace through the HTTP proxy and port-forward, beside it reached directly)")
	flag.Int64Var(&clusterMiB, "cluster-file-mib", 64, "MiB of the file the cluster rows get")
	flag.IntVar(&cfg.failovers, "failovers", 5, "times the cluster rows kill the runner's owner (the median is reported)")
	var only string
	flag.StringVar(&only, "only", "", "comma-separated steps to run (starts, execs, isolation, throughput, runs, rss, files, snapshot, dockerprovider, cp, pull, project, cluster, reach); all when empty")
	flag.BoolVar(&cfg.asJSON, "json", false, "print the results as JSON instead of a Markdown table")
	flag.BoolVar(&cfg.noDocker, "no-docker", false, "skip the Docker references (reported as n/a)")
	flag.Parse()
	if cfg.n < 1 || cfg.cliN < 1 || cfg.starts < 1 || cfg.rounds < 1 || mib < 1 || fileMiB < 1 || b64MiB < 1 || treeMiB < 1 || projMiB < 1 || clusterMiB < 1 || cpMiB < 1 || cfg.failovers < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n, -cli-n, -starts, -rounds, -mib, -file-mib, -b64-mib, -tree-mib, -project-mib, -cp-mib, -cluster-file-mib and -failovers must be at least 1")
		os.Exit(2)
	}
	cfg.size, cfg.fileSize, cfg.b64Size, cfg.treeSize, cfg.projSize = mib<<20, fileMiB<<20, b64MiB<<20, treeMiB<<20, projMiB<<20
	cfg.clusterFileSize = clusterMiB << 20
	cfg.cpSize = cpMiB << 20
	if only != "" {
		cfg.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			cfg.only[strings.TrimSpace(s)] = true
		}
	}
	cfg.binDir = os.Getenv("TETHER_BIN_DIR")
	if cfg.binDir == "" {
		cfg.binDir = "bin"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	binDir, err := filepath.Abs(cfg.binDir)
	if err != nil {
		return err
	}
	for _, b := range []string{"tether", "tether-runner", "tether-provider-local"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%v (run `make build`, or set TETHER_BIN_DIR)", err)
		}
	}
	cfg.binDir = binDir

	progress("starting a controller from %s", binDir)
	t, err := startController(ctx, binDir)
	if err != nil {
		return err
	}
	defer t.close()
	progress("controller on %s (data %s)", t.addr, t.data)

	b := &bench{cfg: cfg, t: t, rep: &report{Environment: environment(ctx, t)}}
	if cfg.noDocker {
		b.noDocker = "skipped with -no-docker"
	} else {
		progress("checking Docker and building %s FROM scratch", benchImage)
		d, err := newDocker(ctx)
		if err != nil {
			b.noDocker = err.Error()
			progress("no Docker reference: %v", err)
		} else {
			defer d.close()
			b.d = d
			b.rep.Environment["docker"] = d.version
			if d.api == nil {
				b.rep.note("Docker Engine API rows are n/a: %v", d.apiErr)
			}
		}
	}
	if b.noDocker != "" {
		b.rep.note("Docker references are n/a: %s", b.noDocker)
	}
	b.rep.note("The local provider's runner is a host process that confines each command in new user, mount, pid, ipc and uts namespaces (no cgroups, the host's network); Docker sets up namespaces and cgroups per container and runs runc per exec. Start and exec rows compare control paths, not equal isolation.")
	b.rep.note("Go-program rows pair tether's Go client with the Docker Engine API over its unix socket; CLI rows pair the two CLIs, a process per call. `true` and `head` are the host's in the workspace and busybox's in the container.")
	b.rep.note("All figures come from this one run on this machine; other load on the host adds noise. Nothing here is asserted.")
	if err := b.all(ctx); err != nil {
		return err
	}
	if cfg.asJSON {
		return b.rep.json(os.Stdout)
	}
	b.rep.markdown(os.Stdout)
	return nil
}

func environment(ctx context.Context, t *tetherEnv) map[string]string {
	env := map[string]string{
		"tether": t.version(ctx) + ", local provider",
		"go":     fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"cpu":    fmt.Sprintf("%s ×%d", cpuModel(), runtime.NumCPU()),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env["kernel"] = strings.TrimSpace(string(b))
	}
	return env
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown cpu"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown cpu"
}
