package docker

import (
	"context"
	"errors"
	"strconv"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/plugins/provider"
)

// Name is the provider name reported by Info.
const Name = "docker"

// DefaultImage is built by `make image` (.ci/images) from scratch.
const DefaultImage = "tether-runner:dev"

// Paths inside the container.
const (
	workspaceDir = "/workspace"
	runnerPath   = "/tether-runner"
	// bootDir holds the environment file for the next start: the
	// controller URL and the one-use token. The boot script empties it as
	// soon as it has read it.
	bootDir  = "/.tether"
	bootEnv  = "/.tether/env"
	labelOwn = "tether.provider"
	// labelURL keeps the controller URL given at create, for a Start that
	// does not name one.
	labelURL = "tether.controller-url"
)

// runnerUser is the container's user: its root, the runner. Agent commands run as the user
// option's uid (TETHER_AGENT_UID), never root.
const runnerUser = "0:0"

// runnerCaps are the runner's only capabilities (every other one is dropped, and
// no-new-privileges is set): SETUID and SETGID to start the agent's commands as the agent's
// uid and gid (and to take its own file access down to them with setfsuid), KILL to signal
// them across uids, and CHOWN for the two things the runner hands to the agent as it starts
// (the workspace root and its agent socket) — CHOWN, like every filesystem capability, leaves
// the effective set when the runner's file uid becomes the agent's, right after. No
// DAC_OVERRIDE or FOWNER: the runner acts on files only as the agent could. The agent's
// commands get none (a uid change from root clears them, and no-new-privileges keeps setuid
// binaries from giving any back).
var runnerCaps = []string{"SETUID", "SETGID", "KILL", "CHOWN"}

// bootScript starts the runner with the controller URL and token from the
// environment file, then empties that file using nothing but the shell, so
// an image needs no more than /bin/sh.
const bootScript = `set -a; . ` + bootEnv + ` || exit 97; set +a; : > ` + bootEnv + `; exec ` + runnerPath

// options are the provider's settings. All but docker_host and stop_timeout
// may also be given per workspace (tether workspace create --provider-opt).
var options = provider.Options{
	{Name: "image", Default: DefaultImage, Pattern: `[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}`,
		Description: "image to run; any image with /bin/sh (the runner is copied in). Never pulled: build or load it first (make image)"},
	{Name: "network", Default: networkPrivate, Pattern: `[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`,
		Description: "private: a network of the workspace's own, made and removed by tether, with no route to the host's loopback (the runner dials the controller's runner socket, mounted in); " +
			"internal: the same, and nothing leaves it (where dockerd manages iptables); host: the host's network, every host loopback service in reach; " +
			"or an existing Docker network, from which the controller URL must be reachable (tether serve --advertise-url)"},
	{Name: "user", Default: "65532:65532", Pattern: `[0-9]{1,10}(:[0-9]{1,10})?`,
		Description: "numeric uid[:gid], not root, the agent's commands run as; it owns /workspace (the runner is the container's root, with SETUID, SETGID and KILL only)"},
	{Name: "cpus", Default: defaultCPUs, Pattern: `[0-9]{1,4}(\.[0-9]{1,3})?`, Description: "CPU limit when the allocation asks for none (e.g. 1.5; the default is cut to the host's CPUs); 0: no limit"},
	{Name: "memory_mib", Default: "2048", Pattern: `[0-9]{1,9}`, Description: "memory limit in MiB when the allocation asks for none; 0: no limit"},
	{Name: "pids", Default: "1024", Pattern: `[0-9]{1,9}`, Description: "process limit when the allocation asks for none; 0: no limit"},
	{Name: "stop_timeout", Default: "10", Pattern: `[0-9]{1,4}`,
		Description: "seconds the runner gets to stop its commands before the container is killed"},
	{Name: "docker_host", Pattern: `(unix|tcp)://[^\s]+`, Description: "Engine API address; default DOCKER_HOST or the local socket"},
}

// configOnly options cannot be changed per allocation.
var configOnly = map[string]bool{"docker_host": true, "stop_timeout": true}

// Provider runs runners in containers. The zero value is not usable; call New.
type Provider struct {
	version string

	mu    sync.Mutex
	cfg   map[string]string // resolved options; nil until Configure
	cli   *client.Client
	ncpu  int // the Docker host's CPUs, once asked
	locks provider.Locks
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Docker provider reporting the given version.
func New(version string) *Provider {
	return &Provider{version: version}
}

// Info describes the provider.
func (p *Provider) Info(context.Context) (provider.Info, error) {
	return provider.Info{
		Name:    Name,
		Version: p.version,
		Capabilities: []string{"exec", "files", provider.CapStart, provider.CapStop, provider.CapEndpoint,
			provider.CapInstallRunner, provider.CapResources, provider.CapIsolation},
		ConfigSchema: options.Schema(),
	}, nil
}

// ValidateConfig checks the options. The state dir is not used: Docker
// keeps the provider's state (labels) itself.
func (p *Provider) ValidateConfig(_ context.Context, cfg provider.Config) error {
	if err := options.Check(cfg.Options); err != nil {
		return err
	}
	resolved := options.Resolve(cfg.Options)
	if err := checkOptions(resolved); err != nil {
		return err
	}
	_, err := limitsFrom(resolved, provider.Resources{})
	return err
}

// defaultCPUs is the cpus option's default.
const defaultCPUs = "2"

// checkOptions refuses resolved options no container should run with.
func checkOptions(opts map[string]string) error {
	if opts["network"] == "none" {
		return provider.Errorf(provider.CodeInvalidArgument, "network none: the runner must reach the controller")
	}
	if uid, gid := parseUser(opts["user"]); uid == 0 || gid == 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "user %s: the agent never runs as root (uid or gid 0)", opts["user"])
	}
	return nil
}

// fitCPUs cuts the default CPU limit to the CPUs the Docker host has (the Engine refuses more);
// a limit that was asked for is left as it is.
func (p *Provider) fitCPUs(ctx context.Context, cli *client.Client, l limits, r provider.Resources, opts map[string]string) limits {
	if r.CPUs != 0 || opts["cpus"] != defaultCPUs {
		return l
	}
	p.mu.Lock()
	n := p.ncpu
	p.mu.Unlock()
	if n == 0 {
		info, err := cli.Info(ctx, client.InfoOptions{})
		if err != nil || info.Info.NCPU <= 0 {
			return l
		}
		n = info.Info.NCPU
		p.mu.Lock()
		p.ncpu = n
		p.mu.Unlock()
	}
	if max := int64(n) * 1e9; l.nanoCPUs > max {
		l.nanoCPUs = max
	}
	return l
}

// Configure adopts the options and makes the Engine API client. It does
// not reach the daemon: a daemon that is down fails the operations that
// need it (unavailable), not the plugin's start.
func (p *Provider) Configure(ctx context.Context, cfg provider.Config) error {
	if err := p.ValidateConfig(ctx, cfg); err != nil {
		return err
	}
	resolved := options.Resolve(cfg.Options)
	opts := []client.Opt{client.FromEnv}
	if h := resolved["docker_host"]; h != "" {
		opts = append(opts, client.WithHost(h))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return provider.Errorf(provider.CodeInvalidArgument, "docker client: %v", err)
	}
	p.mu.Lock()
	old := p.cli
	p.cfg, p.cli = resolved, cli
	p.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// configured returns the client and options, or a typed error before
// Configure.
func (p *Provider) configured() (*client.Client, map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli == nil {
		return nil, nil, provider.Errorf(provider.CodeFailedPrecondition, "docker provider is not configured")
	}
	return p.cli, p.cfg, nil
}

// lock serialises operations on one allocation in this process.
func (p *Provider) lock(id string) func() { return p.locks.Lock(id) }

// containerName is the name of allocation id's container.
func containerName(id string) string { return "tether-" + id }

// limits are the resolved resource limits of one container.
type limits struct {
	nanoCPUs int64
	memory   int64
	pids     int64
}

// limitsFrom takes each limit from the request, else from the options.
func limitsFrom(opts map[string]string, r provider.Resources) (limits, error) {
	var l limits
	if r.CPUs < 0 || r.MemoryMiB < 0 || r.Pids < 0 {
		return l, provider.Errorf(provider.CodeInvalidArgument, "resources must not be negative: %+v", r)
	}
	cpus := r.CPUs
	if cpus == 0 && opts["cpus"] != "" {
		v, err := strconv.ParseFloat(opts["cpus"], 64)
		if err != nil {
			return l, provider.Errorf(provider.CodeInvalidArgument, "cpus %q: %v", opts["cpus"], err)
		}
		cpus = v
	}
	l.nanoCPUs = int64(cpus * 1e9)
	mem := r.MemoryMiB
	if mem == 0 && opts["memory_mib"] != "" {
		v, err := strconv.ParseInt(opts["memory_mib"], 10, 64)
		if err != nil {
			return l, provider.Errorf(provider.CodeInvalidArgument, "memory_mib %q: %v", opts["memory_mib"], err)
		}
		mem = v
	}
	if mem > 0 && mem < 8 {
		return l, provider.Errorf(provider.CodeInvalidArgument, "memory limit %d MiB is too small to run anything", mem)
	}
	l.memory = mem << 20
	l.pids = r.Pids
	if l.pids == 0 && opts["pids"] != "" {
		v, err := strconv.ParseInt(opts["pids"], 10, 64)
		if err != nil {
			return l, provider.Errorf(provider.CodeInvalidArgument, "pids %q: %v", opts["pids"], err)
		}
		l.pids = v
	}
	return l, nil
}

// typed turns an Engine API error into a provider error.
func typed(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var code string
	switch {
	case cerrdefs.IsNotFound(err):
		code = provider.CodeNotFound
	case cerrdefs.IsConflict(err) || cerrdefs.IsAlreadyExists(err):
		code = provider.CodeConflict
	case cerrdefs.IsInvalidArgument(err):
		code = provider.CodeInvalidArgument
	case client.IsErrConnectionFailed(err):
		code = provider.CodeUnavailable
	default:
		code = provider.CodeProviderFailed
	}
	return provider.Errorf(code, "%s: %v", what, err)
}
