package local

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// Name is the provider name reported by Info.
const Name = "local"

// Files inside StateDir/<allocation>/. The log, pid file and marker sit
// beside the workspace root, not in it, so workspace snapshots never pick
// them up.
const (
	rootDirName    = "root"
	logFileName    = "runner.log"
	pidFileName    = "runner.pid"
	markerFileName = "allocation.json"
)

// options are per allocation; the provider's only other state is its state dir.
var options = provider.Options{
	{Name: "isolation", Default: isolationNamespaces, Pattern: isolationNamespaces + "|" + isolationNone,
		Description: "namespaces: each agent command runs in new user, mount, pid, ipc and uts namespaces seeing only its workspace, read-only system directories and a private /tmp and HOME; none: the agent runs as the controller's user with everything it can reach (recorded and shown)"},
}

// Provider runs runners as host processes. The zero value is not usable;
// call New.
type Provider struct {
	version string
	// stopGrace is how long the runner gets after SIGTERM to stop the
	// commands it started and exit by itself; then its session is SIGKILLed.
	stopGrace time.Duration

	mu       sync.Mutex
	stateDir string            // "" until Configure succeeds
	opts     map[string]string // configured option defaults
	locks    provider.Locks    // per allocation, serialising Create/Stop/Destroy
	probes   probeCache        // runner binaries proved able to confine
}

var _ provider.Provider = (*Provider)(nil)

// New returns a local provider reporting the given version.
func New(version string) *Provider {
	return &Provider{
		version:   version,
		stopGrace: defaultStopGrace,
	}
}

// Info describes the provider.
func (p *Provider) Info(context.Context) (provider.Info, error) {
	return provider.Info{
		Name:    Name,
		Version: p.version,
		Capabilities: []string{"exec", "files", provider.CapStart, provider.CapStop,
			provider.CapEndpoint, provider.CapInstallRunner, provider.CapHostLocal},
		ConfigSchema: options.Schema(),
	}, nil
}

// ValidateConfig refuses any option (there are none) and a state dir that
// is not an absolute path.
func (p *Provider) ValidateConfig(_ context.Context, cfg provider.Config) error {
	if err := options.Check(cfg.Options); err != nil {
		return err
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return provider.Errorf(provider.CodeInvalidArgument, "state dir must be an absolute path, got %q", cfg.StateDir)
	}
	return nil
}

// Configure adopts cfg.StateDir, creating it 0700 if missing. It refuses a
// state dir, or an allocation dir inside it, that another user could have
// planted or could tamper with: runners are started from there with the
// controller's privileges.
func (p *Provider) Configure(ctx context.Context, cfg provider.Config) error {
	if err := p.ValidateConfig(ctx, cfg); err != nil {
		return err
	}
	dir := filepath.Clean(cfg.StateDir)
	if err := ensurePrivateDir(dir); err != nil {
		return err
	}
	if err := checkAllocationDirs(dir); err != nil {
		return err
	}
	p.mu.Lock()
	p.stateDir, p.opts = dir, cfg.Options
	p.mu.Unlock()
	return nil
}

// configOptions are the options the provider was configured with, the defaults every
// allocation's own options override.
func (p *Provider) configOptions() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opts
}

// configured returns the state dir, or a typed error before Configure.
func (p *Provider) configured() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stateDir == "" {
		return "", provider.Errorf(provider.CodeFailedPrecondition, "local provider is not configured")
	}
	return p.stateDir, nil
}

// lock serialises operations on one allocation; other allocations proceed,
// so a slow Stop does not hold up unrelated Creates.
func (p *Provider) lock(id string) func() { return p.locks.Lock(id) }

// allocationDir validates id and returns its directory under the state dir.
func (p *Provider) allocationDir(id string) (string, error) {
	stateDir, err := p.configured()
	if err != nil {
		return "", err
	}
	if err := provider.CheckAllocationID(id); err != nil {
		return "", err
	}
	return filepath.Join(stateDir, id), nil
}
