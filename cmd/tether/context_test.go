package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/cmd/tether/cliconfig"
	"github.com/tetherhq/tether/protocol"
)

// contextEnv gives a test its own config file and no address, token or context from outside.
func contextEnv(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tether", "config.yaml")
	t.Setenv("TETHER_CONFIG", path)
	for _, k := range []string{"TETHER_ADDR", "TETHER_TOKEN", "TETHER_CONTEXT"} {
		t.Setenv(k, "")
	}
	return path
}

func TestContextPrecedence(t *testing.T) {
	path := contextEnv(t)
	tokFile := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(tokFile, []byte("tok-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &cliconfig.Config{Current: "a", Contexts: []cliconfig.Context{
		{Name: "a", Addr: "http://a.example:1", Token: "tok-a"},
		{Name: "b", Addr: "http://b.example:2", TokenFile: tokFile},
	}}
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name               string
		flags              cli
		env                map[string]string
		addr, token, ctxID string
	}{
		{"the current context", cli{}, nil, "http://a.example:1", "tok-a", "a"},
		{"TETHER_CONTEXT over the current one", cli{}, map[string]string{"TETHER_CONTEXT": "b"}, "http://b.example:2", "tok-b", "b"},
		{"--context over TETHER_CONTEXT", cli{context: "a"}, map[string]string{"TETHER_CONTEXT": "b"}, "http://a.example:1", "tok-a", "a"},
		{"TETHER_TOKEN over the context's", cli{}, map[string]string{"TETHER_TOKEN": "tok-env"}, "http://a.example:1", "tok-env", "a"},
		{"--token over TETHER_TOKEN", cli{token: "tok-flag"}, map[string]string{"TETHER_TOKEN": "tok-env"}, "http://a.example:1", "tok-flag", "a"},
		// An address from outside the context never gets the context's token.
		{"TETHER_ADDR over the context's, without its token", cli{}, map[string]string{"TETHER_ADDR": "c.example:3"}, "c.example:3", "", "a"},
		{"--addr over TETHER_ADDR", cli{addr: "d.example:4"}, map[string]string{"TETHER_ADDR": "c.example:3", "TETHER_TOKEN": "tok-env"}, "d.example:4", "tok-env", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := tc.flags.target()
			if err != nil || got.addr != tc.addr || got.token != tc.token || got.context != tc.ctxID {
				t.Fatalf("target() = %+v, %v; want addr %s token %q context %s", got, err, tc.addr, tc.token, tc.ctxID)
			}
		})
	}
	t.Run("a context that does not exist is refused", func(t *testing.T) {
		c := cli{context: "nope"}
		if _, err := c.target(); protocol.CodeOf(err) != protocol.CodeNotFound || !strings.Contains(err.Error(), `no context "nope"`) {
			t.Fatalf("target() with --context nope: %v", err)
		}
	})
	t.Run("no config file: the default", func(t *testing.T) {
		t.Setenv("TETHER_CONFIG", filepath.Join(t.TempDir(), "none.yaml"))
		got, err := (&cli{}).target()
		if err != nil || got.addr != defaultAddr || got.token != "" || got.context != "" {
			t.Fatalf("target() = %+v, %v", got, err)
		}
	})
	t.Run("a broken file is an error naming it", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(bad, []byte("contexts:\n- name: x\n  adr: typo:1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TETHER_CONFIG", bad)
		code, _, stderr := tether(t, "workspace", "ls")
		if code != 2 || !strings.HasPrefix(stderr, "error: invalid_argument: config file: "+bad) || !strings.Contains(stderr, "adr") {
			t.Fatalf("broken config: exit %d, %q", code, stderr)
		}
	})
}

func TestContextCommands(t *testing.T) {
	path := contextEnv(t)
	must := func(stdin string, args ...string) string {
		t.Helper()
		code, stdout, stderr := tetherIn(t, stdin, args...)
		if code != 0 {
			t.Fatalf("tether %s: exit %d, %q", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	tokFile := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tokFile, []byte("tot_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must("", "context", "set", "dev", "--addr", "127.0.0.1:7420", "--token-file", tokFile)
	must("tot_secret_stdin\n", "context", "set", "prod", "--addr", "https://tether.example", "--token-stdin")
	// The first context made became current; a second did not.
	if got := must("", "context", "current"); got != "dev\n" {
		t.Fatalf("current = %q", got)
	}
	must("", "context", "use", "prod")
	ls := must("", "context", "ls")
	if strings.Contains(ls, "tot_secret_stdin") || !strings.Contains(ls, "*        prod  https://tether.example  in config") || !strings.Contains(ls, "http://127.0.0.1:7420") {
		t.Fatalf("context ls:\n%s", ls)
	}
	var rows []map[string]any
	lsJSON := must("", "context", "ls", "--json")
	if err := json.Unmarshal([]byte(lsJSON), &rows); err != nil || len(rows) != 2 || strings.Contains(lsJSON, "tot_secret") {
		t.Fatalf("context ls --json: %s (%v)", lsJSON, err)
	}

	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, mode %v; want 0600", err, fi.Mode())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("the config's directory holds %d entries; a temporary file was left: %v", len(ents), ents)
	}
	// A file made readable by others is made private again at the next write.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	must("", "context", "use", "dev")
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("after a write the file is %v", fi.Mode())
	}

	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"", []string{"context", "use", "nope"}, 3, "not_found: no context \"nope\""},
		{"", []string{"context", "rm", "nope"}, 3, "not_found: no context \"nope\""},
		{"", []string{"context", "set", "new"}, 2, "a new context needs --addr"},
		{"", []string{"context", "set", "bad name", "--addr", "x:1"}, 2, `context name "bad name"`},
		{"", []string{"context", "set", "x", "--addr", "ftp://x:1"}, 2, `controller address "ftp://x:1"`},
		{"", []string{"context", "set", "x", "--addr", "x:1", "--token-stdin"}, 2, "--token-stdin: stdin: want one token"},
		{"t", []string{"context", "set", "x", "--addr", "x:1", "--token-stdin", "--token-file", tokFile}, 2, "give one of"},
	} {
		before, _ := os.ReadFile(path)
		code, _, stderr := tetherIn(t, tc.stdin, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("tether %s: exit %d, %q; want %d, %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.msg)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("tether %s changed the file", strings.Join(tc.args, " "))
		}
	}

	must("", "context", "rm", "dev")
	if code, _, stderr := tether(t, "context", "current"); code != 3 || !strings.Contains(stderr, "no current context") {
		t.Fatalf("current after removing it: exit %d, %q", code, stderr)
	}
	cfg, err := cliconfig.Load(path)
	if err != nil || len(cfg.Contexts) != 1 || cfg.Contexts[0].Token != "tot_secret_stdin" {
		t.Fatalf("file after rm: %+v, %v", cfg, err)
	}
}

func TestConfigPath(t *testing.T) {
	t.Setenv("TETHER_CONFIG", "")
	t.Setenv("HOME", "/home/someone")
	t.Setenv("XDG_CONFIG_HOME", "")
	for xdg, want := range map[string]string{
		"":          "/home/someone/.config/tether/config.yaml",
		"/xdg":      "/xdg/tether/config.yaml",
		"relative/": "/home/someone/.config/tether/config.yaml", // the XDG spec: ignore a relative one
	} {
		t.Setenv("XDG_CONFIG_HOME", xdg)
		if got, err := cliconfig.Path(); err != nil || got != want {
			t.Errorf("XDG_CONFIG_HOME=%q: %s, %v; want %s", xdg, got, err, want)
		}
	}
	t.Setenv("TETHER_CONFIG", "/elsewhere.yaml")
	if got, _ := cliconfig.Path(); got != "/elsewhere.yaml" {
		t.Errorf("TETHER_CONFIG ignored: %s", got)
	}
}

// A context with an address and no token never gets the local data dir's operator token: that
// controller may be another machine's, reached over plain http.
func TestContextWithoutTokenKeepsTheOperatorTokenHome(t *testing.T) {
	path := contextEnv(t)
	cfg := &cliconfig.Config{Current: "far", Contexts: []cliconfig.Context{{Name: "far", Addr: "http://far.example:7420"}}}
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "operator.token"), []byte("top_local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cli{data: data}
	if _, err := c.client(); protocol.CodeOf(err) != protocol.CodeUnauthorized || !strings.Contains(err.Error(), `context "far" has no token`) {
		t.Fatalf("client() for a token-less context: %v", err)
	}
	// The data dir's token still serves the default address.
	t.Setenv("TETHER_CONFIG", filepath.Join(t.TempDir(), "none.yaml"))
	if _, err := c.client(); err != nil {
		t.Fatalf("client() with no context: %v", err)
	}
}
