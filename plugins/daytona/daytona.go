package daytona

import (
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// Name is the provider name reported by Info.
const Name = "daytona"

// DefaultAPIURL is Daytona's hosted API.
const DefaultAPIURL = "https://app.daytona.io/api"

// CodeRetentionUnconfirmed fails a Stop whose fresh read does not show
// auto-delete disabled: stopping then could start a deletion clock.
const CodeRetentionUnconfirmed = "retention_unconfirmed"

const (
	labelOwn = "tether.provider"
	// labelURL keeps the controller URL given at create, for a Start that
	// does not name one.
	labelURL = "tether.controller-url"
	// The workspace, under the sandbox user's home.
	workspaceSub = "workspace"
)

var options = provider.Options{
	{Name: "api_url", Default: DefaultAPIURL, Pattern: `https?://[^\s]+`, Description: "Daytona API base URL"},
	{Name: "api_key_env", Default: "DAYTONA_API_KEY", Pattern: `[A-Z_][A-Z0-9_]{0,127}`,
		Description: "environment variable holding the Daytona API key (the key itself is never configured)"},
	{Name: "target", Pattern: `[a-z0-9-]{0,63}`, Description: "Daytona target (region), e.g. us or eu; unset: the organisation's default"},
	{Name: "snapshot", Pattern: `[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}`,
		Description: "snapshot sandboxes start from; its resources are the snapshot's (unset, with no image: Daytona's default snapshot)"},
	{Name: "image", Pattern: `[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}`,
		Description: "container image sandboxes are built from (Daytona's buildInfo) instead of a snapshot; the only way to set cpus, memory and disk"},
	{Name: "cpus", Pattern: `[0-9]{1,3}`, Description: "vCPUs when the allocation asks for none; needs image"},
	{Name: "memory_gib", Pattern: `[0-9]{1,4}`, Description: "memory in GiB when the allocation asks for none; needs image"},
	{Name: "disk_gib", Pattern: `[0-9]{1,5}`, Description: "disk in GiB; needs image"},
	{Name: "auto_stop_interval", Default: "0", Pattern: `[0-9]{1,7}`,
		Description: "minutes of inactivity before Daytona stops the sandbox; 0 disables (the default: the runner's connection is not activity Daytona sees)"},
	{Name: "auto_archive_interval", Pattern: `[0-9]{1,7}`, Description: "minutes a stopped sandbox waits before Daytona archives it; unset: Daytona's default"},
	{Name: "auto_delete_interval", Default: "-1", Pattern: `-1|[0-9]{1,7}`,
		Description: "minutes a stopped sandbox waits before Daytona deletes it; -1 disables. Stop always disables it (stop-and-retain)"},
	{Name: "start_timeout", Default: "900", Pattern: `[0-9]{1,5}`,
		Description: "seconds to wait for a sandbox to start; restoring an archived one can take minutes"},
	{Name: "stop_timeout", Default: "300", Pattern: `[0-9]{1,5}`, Description: "seconds to wait for a sandbox to stop"},
}

// configOnly options cannot be changed per allocation.
var configOnly = map[string]bool{"api_url": true, "api_key_env": true, "start_timeout": true, "stop_timeout": true}

// Provider runs runners in Daytona sandboxes. Call New.
type Provider struct {
	version string

	mu       sync.Mutex
	cfg      map[string]string // nil until Configure
	stateDir string
	cli      *Client
	keyEnv   string
	locks    provider.Locks
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Daytona provider reporting version.
func New(version string) *Provider {
	return &Provider{version: version}
}

// Info describes the provider.
func (p *Provider) Info(context.Context) (provider.Info, error) {
	return provider.Info{
		Name:    Name,
		Version: p.version,
		Capabilities: []string{provider.CapStart, provider.CapStop, provider.CapArchive, provider.CapEndpoint,
			provider.CapInstallRunner, provider.CapResources, provider.CapIsolation},
		ConfigSchema: options.Schema(),
	}, nil
}

// ValidateConfig checks the options. The API key is not config.
func (p *Provider) ValidateConfig(_ context.Context, cfg provider.Config) error {
	if err := options.Check(cfg.Options); err != nil {
		return err
	}
	opts := options.Resolve(cfg.Options)
	if _, err := intervals(opts); err != nil {
		return err
	}
	return checkSource(opts, provider.Resources{})
}

// checkSource refuses resources without an image: Daytona takes cpu,
// memory and disk only with buildInfo and answers 400 "Cannot specify
// Sandbox resources when using a snapshot" otherwise.
func checkSource(opts map[string]string, r provider.Resources) error {
	if opts["snapshot"] != "" && opts["image"] != "" {
		return provider.Errorf(provider.CodeInvalidArgument, "options snapshot and image exclude each other")
	}
	if opts["image"] != "" {
		return nil
	}
	for _, o := range []string{"cpus", "memory_gib", "disk_gib"} {
		if opts[o] != "" {
			return provider.Errorf(provider.CodeInvalidArgument, "option %s needs option image: a Daytona sandbox started from a snapshot has the snapshot's resources", o)
		}
	}
	if r.CPUs > 0 || r.MemoryMiB > 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "resources %+v need option image: a Daytona sandbox started from a snapshot has the snapshot's resources", r)
	}
	return nil
}

// Configure adopts the options. It does not reach Daytona, and a missing
// API key fails the operations that need it, not the plugin's start.
func (p *Provider) Configure(ctx context.Context, cfg provider.Config) error {
	if err := p.ValidateConfig(ctx, cfg); err != nil {
		return err
	}
	resolved := options.Resolve(cfg.Options)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg, p.stateDir, p.keyEnv = resolved, cfg.StateDir, resolved["api_key_env"]
	p.cli = NewClient(resolved["api_url"], os.Getenv(p.keyEnv))
	return nil
}

func (p *Provider) configured() (*Client, map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli == nil {
		return nil, nil, provider.Errorf(provider.CodeFailedPrecondition, "daytona provider is not configured")
	}
	if p.cli.key == "" {
		return nil, nil, provider.Errorf(provider.CodeFailedPrecondition, "no Daytona API key: set %s in the controller's environment", p.keyEnv)
	}
	return p.cli, p.cfg, nil
}

// cfgNow is the adopted configuration (nil before Configure).
func (p *Provider) cfgNow() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// lock serialises operations on one allocation in this process.
func (p *Provider) lock(id string) func() { return p.locks.Lock(id) }

// sandboxName is allocation id's sandbox name.
func sandboxName(id string) string { return "tether-" + id }

// lifecycle intervals, in minutes; nil leaves Daytona's default.
type lifecycle struct{ stop, archive, delete *int }

func intervals(opts map[string]string) (lifecycle, error) {
	var l lifecycle
	for name, dst := range map[string]**int{"auto_stop_interval": &l.stop, "auto_archive_interval": &l.archive, "auto_delete_interval": &l.delete} {
		if opts[name] == "" {
			continue
		}
		v, err := strconv.Atoi(opts[name])
		if err != nil {
			return l, provider.Errorf(provider.CodeInvalidArgument, "%s %q: %v", name, opts[name], err)
		}
		*dst = &v
	}
	return l, nil
}

func startTimeout(opts map[string]string) time.Duration { return seconds(opts["start_timeout"], 900) }

func stopTimeout(opts map[string]string) time.Duration { return seconds(opts["stop_timeout"], 300) }

func seconds(v string, def int) time.Duration {
	s, _ := strconv.Atoi(v)
	if s <= 0 {
		s = def
	}
	return time.Duration(s) * time.Second
}

// owns reports whether sb carries this provider's labels for allocation id.
func owns(sb Sandbox, id string) bool {
	return sb.Labels[labelOwn] == Name && sb.Labels[provider.LabelAllocation] == id && sb.Name == sandboxName(id)
}

// owned reads allocation id's sandbox and checks it is ours: CodeNotFound
// when there is none (or it is destroyed), CodeForeign when the name is
// taken by a sandbox without our labels.
func (p *Provider) owned(ctx context.Context, id string) (*Client, Sandbox, error) {
	cli, _, err := p.configured()
	if err != nil {
		return nil, Sandbox{}, err
	}
	if err := provider.CheckAllocationID(id); err != nil {
		return nil, Sandbox{}, err
	}
	sb, err := cli.Get(ctx, sandboxName(id))
	if err != nil {
		err = typed("get sandbox "+sandboxName(id), err)
		if provider.ErrorCode(err) == provider.CodeNotFound {
			return nil, Sandbox{}, provider.Errorf(provider.CodeNotFound, "allocation %s has no sandbox", id)
		}
		return nil, Sandbox{}, err
	}
	if !owns(sb, id) {
		return nil, Sandbox{}, provider.Errorf(provider.CodeForeign,
			"sandbox %s was not made by tether's daytona provider for allocation %s; refusing to touch it", sandboxName(id), id)
	}
	if sb.State == StateDestroyed || sb.State == StateDestroying {
		return nil, Sandbox{}, provider.Errorf(provider.CodeNotFound, "allocation %s's sandbox is %s", id, sb.State)
	}
	return cli, sb, nil
}
