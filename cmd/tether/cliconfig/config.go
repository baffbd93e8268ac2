// Package cliconfig is the CLI's configuration file: named contexts, each a controller address
// with the token to use there, and which one is current — kubectl's and docker's contexts.
package cliconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
)

// maxSize bounds the file read: a few contexts are a few hundred bytes.
const maxSize = 1 << 20

// Context is one controller to talk to.
type Context struct {
	Name string `yaml:"name" json:"name"`
	Addr string `yaml:"addr" json:"addr"`
	// Token is the token itself, kept in the file (written 0600); TokenFile names a file holding
	// it instead (read at each call, so a rotated token is picked up). At most one is set.
	Token     string `yaml:"token,omitempty" json:"-"`
	TokenFile string `yaml:"token_file,omitempty" json:"token_file,omitempty"`
}

// Config is the whole file.
type Config struct {
	Current  string    `yaml:"current_context,omitempty"`
	Contexts []Context `yaml:"contexts,omitempty"`
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName reports whether name may name a context: short, no spaces, no path separators.
func ValidName(name string) bool { return validName.MatchString(name) }

// Path is where the file lives: $TETHER_CONFIG, else $XDG_CONFIG_HOME/tether/config.yaml, else
// ~/.config/tether/config.yaml (the XDG default).
func Path() (string, error) {
	if p := os.Getenv("TETHER_CONFIG"); p != "" {
		return p, nil
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) { // the XDG spec says to ignore a relative one
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the config file: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "tether", "config.yaml"), nil
}

// Load reads the file at path; a file that does not exist is an empty config. Unknown keys,
// duplicate or invalid names and a current context that is not defined are errors: a typo in a
// key must not silently send a token elsewhere.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxSize)
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

func (c *Config) check() error {
	seen := map[string]bool{}
	for _, ctx := range c.Contexts {
		switch {
		case !ValidName(ctx.Name):
			return fmt.Errorf("context name %q: want letters, digits, '.', '_' or '-'", ctx.Name)
		case seen[ctx.Name]:
			return fmt.Errorf("context %q is defined twice", ctx.Name)
		case ctx.Addr == "":
			return fmt.Errorf("context %q has no addr", ctx.Name)
		case ctx.Token != "" && ctx.TokenFile != "":
			return fmt.Errorf("context %q has both token and token_file", ctx.Name)
		}
		seen[ctx.Name] = true
	}
	if c.Current != "" && !seen[c.Current] {
		return fmt.Errorf("current_context %q is not defined", c.Current)
	}
	return nil
}

// Get finds a context by name.
func (c *Config) Get(name string) (Context, bool) {
	i := slices.IndexFunc(c.Contexts, func(x Context) bool { return x.Name == name })
	if i < 0 {
		return Context{}, false
	}
	return c.Contexts[i], true
}

// Set adds ctx or replaces the context of its name.
func (c *Config) Set(ctx Context) {
	if i := slices.IndexFunc(c.Contexts, func(x Context) bool { return x.Name == ctx.Name }); i >= 0 {
		c.Contexts[i] = ctx
		return
	}
	c.Contexts = append(c.Contexts, ctx)
}

// Remove deletes the named context (and makes none current if it was); false if there was none.
func (c *Config) Remove(name string) bool {
	n := len(c.Contexts)
	c.Contexts = slices.DeleteFunc(c.Contexts, func(x Context) bool { return x.Name == name })
	if c.Current == name {
		c.Current = ""
	}
	return len(c.Contexts) != n
}

// Save writes the file atomically and private: a temporary file (0600) in the same directory,
// synced, renamed over the old one. A reader sees the old file or the new one, never half of
// either, and the token is never readable by others, not even for an instant.
func (c *Config) Save(path string) error {
	if err := c.check(); err != nil {
		return err
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".config.yaml.tmp-*") // CreateTemp makes it 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the directory is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
