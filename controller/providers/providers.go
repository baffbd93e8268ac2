package providers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

var providerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// pluginPrefix names provider plugin binaries: tether-provider-<name>, next to tether.
const pluginPrefix = "tether-provider-"

// Set loads provider plugins on first use, keeps them for the controller's lifetime and
// restarts one whose process died on its next use.
type Set struct {
	dir      string
	stateDir string
	// options configure each provider by name (tether serve --provider-config NAME.KEY=VALUE).
	options map[string]map[string]string
	log     *slog.Logger
	// restarted is told the name of each plugin started again after its process died.
	restarted func(provider string)

	mu      sync.Mutex
	plugins map[string]*pluginHandle
}

// Option changes a Set from its defaults.
type Option func(*Set)

// OnRestart has fn told the provider's name whenever a plugin whose process died is started
// again (the controller counts them).
func OnRestart(fn func(provider string)) Option { return func(s *Set) { s.restarted = fn } }

// New returns the set of the plugins in dir (tether-provider-<name>), each configured with a
// state directory under stateDir and its options (by provider name). The plugins' own logs
// (go-plugin's hclog) go to log too, with their provider's name (see slogHCLog).
func New(dir, stateDir string, options map[string]map[string]string, log *slog.Logger, opts ...Option) *Set {
	s := &Set{dir: dir, stateDir: stateDir, options: options, log: log, plugins: map[string]*pluginHandle{}, restarted: func(string) {}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Get returns the named provider, its plugin started and configured. The returned Provider
// outlives plugin crashes: each call restarts the plugin if its process is gone.
func (p *Set) Get(ctx context.Context, name string) (provider.Provider, error) {
	h, err := p.handle(name)
	if err != nil {
		return nil, err
	}
	if _, err := h.live(ctx, true); err != nil {
		return nil, err
	}
	return h, nil
}

// handle returns the plugin handle for name, checking the binary exists.
func (p *Set) handle(name string) (*pluginHandle, error) {
	if !providerName.MatchString(name) {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "invalid provider name %q", name)
	}
	path := filepath.Join(p.dir, pluginPrefix+name)
	if _, err := os.Stat(path); err != nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "provider %q: no plugin at %s", name, path)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.plugins[name]
	if !ok {
		h = &pluginHandle{set: p, name: name, path: path}
		p.plugins[name] = h
	}
	return h, nil
}

// Discover lists the provider names with a plugin binary in the plugin directory.
func (p *Set) Discover() ([]string, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), pluginPrefix)
		if !ok || !providerName.MatchString(name) || e.IsDir() {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Mode().Perm()&0o111 != 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Info asks the named plugin who it is, starting it if needed but not configuring it, so a
// provider whose configuration fails still shows up.
func (p *Set) Info(ctx context.Context, name string) (provider.Info, string, error) {
	h, err := p.handle(name)
	if err != nil {
		return provider.Info{}, "", err
	}
	c, err := h.live(ctx, false)
	if err != nil {
		return provider.Info{}, h.path, err
	}
	info, err := c.Info(ctx)
	return info, h.path, h.failed(c, "Info", err)
}

// Close stops every plugin process.
func (p *Set) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.plugins {
		h.close()
	}
}

// pluginHandle is one provider plugin. It implements provider.Provider by calling the live
// plugin process, starting (again) and configuring it first when needed.
type pluginHandle struct {
	set        *Set
	name, path string

	mu         sync.Mutex
	client     *provider.Client
	configured bool
	// died is set when the plugin's process was found dead: the next start is a restart.
	died bool
}

var _ provider.Provider = (*pluginHandle)(nil)

// live returns a running plugin client. A plugin whose process exited or that does not answer
// a ping is dropped, with its last words logged, and started anew.
func (h *pluginHandle) live(ctx context.Context, configure bool) (*provider.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		if err := h.client.Ping(); err != nil {
			h.set.log.Warn("provider plugin is gone; restarting it", "provider", h.name, "pid", h.client.Pid(),
				"err", err, "last_output", strings.Join(h.client.LastOutput(), "\n"))
			h.client.Close()
			h.client, h.configured, h.died = nil, false, true
		}
	}
	if h.client == nil {
		c, err := provider.Open(ctx, h.path, h.set.pluginLogger(h.name))
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeProviderFailed, "provider %q: %v", h.name, err)
		}
		h.client = c
		if h.died {
			h.died = false
			h.set.restarted(h.name)
		}
	}
	if configure && !h.configured {
		if err := os.MkdirAll(h.set.stateDir, 0o700); err != nil {
			return nil, err
		}
		err := h.client.Configure(ctx, provider.Config{StateDir: filepath.Join(h.set.stateDir, h.name), Options: h.set.options[h.name]})
		if err != nil {
			return nil, h.failedLocked(h.client, "Configure", err)
		}
		h.configured = true
	}
	return h.client, nil
}

// failed passes err on; if the plugin process died during the call, it drops the client (the
// next use starts a new one) and says so, with the plugin's last output lines.
func (h *pluginHandle) failed(c *provider.Client, op string, err error) error {
	if err == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failedLocked(c, op, err)
}

func (h *pluginHandle) failedLocked(c *provider.Client, op string, err error) error {
	code := provider.ErrorCode(err)
	if code != provider.CodeUnavailable && code != provider.CodeProviderFailed {
		return err
	}
	// The connection drops a moment before the process is reaped and its stderr drained.
	deadline := time.Now().Add(2 * time.Second)
	for !c.Exited() && code == provider.CodeUnavailable && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !c.Exited() {
		return err
	}
	last := c.LastOutput()
	h.set.log.Error("provider plugin died", "provider", h.name, "pid", c.Pid(), "op", op, "last_output", strings.Join(last, "\n"))
	if h.client == c {
		c.Close()
		h.client, h.configured, h.died = nil, false, true
	}
	msg := fmt.Sprintf("provider %s: the plugin process died during %s (it is restarted on next use): %v", h.name, op, err)
	if len(last) > 0 {
		msg += "; its last output:\n  " + strings.Join(crashLines(last, 12), "\n  ")
	}
	return provider.Errorf(provider.CodeUnavailable, "%s", msg)
}

// crashLines picks at most n of a dead plugin's last lines for an error message: from a Go
// panic, the lines leading up to it and its first frames; otherwise the last ones.
func crashLines(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			start := max(0, i-2)
			return append(lines[start:min(len(lines), start+n):min(len(lines), start+n)], "...")
		}
	}
	return append([]string{"..."}, lines[len(lines)-n:]...)
}

func (h *pluginHandle) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		h.client.Close()
		h.client, h.configured = nil, false
	}
}

// call runs fn on the live, configured plugin.
func (h *pluginHandle) call(ctx context.Context, op string, fn func(c *provider.Client) error) error {
	c, err := h.live(ctx, true)
	if err != nil {
		return err
	}
	return h.failed(c, op, fn(c))
}

func (h *pluginHandle) Info(ctx context.Context) (info provider.Info, err error) {
	err = h.call(ctx, "Info", func(c *provider.Client) (err error) { info, err = c.Info(ctx); return })
	return info, err
}

func (h *pluginHandle) ValidateConfig(ctx context.Context, cfg provider.Config) error {
	return h.call(ctx, "ValidateConfig", func(c *provider.Client) error { return c.ValidateConfig(ctx, cfg) })
}

// Configure is the controller's business (live does it); a caller may not reconfigure.
func (h *pluginHandle) Configure(context.Context, provider.Config) error {
	return provider.Errorf(provider.CodeUnsupported, "the controller configures provider %s itself", h.name)
}

func (h *pluginHandle) Create(ctx context.Context, req provider.CreateRequest) (a provider.Allocation, err error) {
	err = h.call(ctx, "Create", func(c *provider.Client) (err error) { a, err = c.Create(ctx, req); return })
	return a, err
}

func (h *pluginHandle) Inspect(ctx context.Context, id string) (st provider.Status, err error) {
	err = h.call(ctx, "Inspect", func(c *provider.Client) (err error) { st, err = c.Inspect(ctx, id); return })
	return st, err
}

func (h *pluginHandle) Start(ctx context.Context, req provider.StartRequest) error {
	return h.call(ctx, "Start", func(c *provider.Client) error { return c.Start(ctx, req) })
}

func (h *pluginHandle) Stop(ctx context.Context, id string) error {
	return h.call(ctx, "Stop", func(c *provider.Client) error { return c.Stop(ctx, id) })
}

func (h *pluginHandle) Archive(ctx context.Context, id string) error {
	return h.call(ctx, "Archive", func(c *provider.Client) error { return c.Archive(ctx, id) })
}

func (h *pluginHandle) Destroy(ctx context.Context, id string) error {
	return h.call(ctx, "Destroy", func(c *provider.Client) error { return c.Destroy(ctx, id) })
}

func (h *pluginHandle) Endpoint(ctx context.Context, id string, port int) (ep provider.Endpoint, err error) {
	err = h.call(ctx, "Endpoint", func(c *provider.Client) (err error) { ep, err = c.Endpoint(ctx, id, port); return })
	return ep, err
}

func (h *pluginHandle) InstallRunner(ctx context.Context, id, runner string) error {
	return h.call(ctx, "InstallRunner", func(c *provider.Client) error { return c.InstallRunner(ctx, id, runner) })
}

// ExportFiles copies a workspace's files out through the provider's own file API (optional:
// providers without it answer unsupported).
func (h *pluginHandle) ExportFiles(ctx context.Context, req provider.ExportRequest) (res provider.ExportResult, err error) {
	err = h.call(ctx, "ExportFiles", func(c *provider.Client) (err error) { res, err = c.ExportFiles(ctx, req); return })
	return res, err
}
