package controller

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

var providerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// providerSet loads provider plugins on first use and keeps them for the controller's lifetime.
type providerSet struct {
	dir      string
	stateDir string
	log      *slog.Logger

	mu      sync.Mutex
	clients map[string]*provider.Client
}

func newProviderSet(dir, stateDir string, log *slog.Logger) *providerSet {
	return &providerSet{dir: dir, stateDir: stateDir, log: log, clients: map[string]*provider.Client{}}
}

func (p *providerSet) Get(ctx context.Context, name string) (provider.Provider, error) {
	if !providerName.MatchString(name) {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "invalid provider name %q", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[name]; ok {
		return c, nil
	}
	path := filepath.Join(p.dir, "tether-provider-"+name)
	if _, err := os.Stat(path); err != nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "provider %q: no plugin at %s", name, path)
	}
	// Plugin chatter (start, exit) is debug detail; warnings and errors still show.
	logger := hclog.New(&hclog.LoggerOptions{Name: "provider." + name, Output: os.Stderr, Level: hclog.LevelFromString(firstNonEmpty(os.Getenv("TETHER_PLUGIN_LOG"), "warn"))})
	c, err := provider.Open(ctx, path, logger)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeProviderFailed, "provider %q: %v", name, err)
	}
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.Configure(ctx, provider.Config{StateDir: filepath.Join(p.stateDir, name)}); err != nil {
		c.Close()
		return nil, err
	}
	p.clients[name] = c
	return c, nil
}

func (p *providerSet) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, c := range p.clients {
		c.Close()
		delete(p.clients, name)
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
