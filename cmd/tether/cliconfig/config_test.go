package cliconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadRefusesWhatCouldSendATokenElsewhere(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key":       "contexts:\n- name: a\n  addr: x:1\n  tokn: t\n",
		"duplicate name":    "contexts:\n- name: a\n  addr: x:1\n- name: a\n  addr: y:1\n",
		"undefined current": "current_context: b\ncontexts:\n- name: a\n  addr: x:1\n",
		"no addr":           "contexts:\n- name: a\n",
		"bad name":          "contexts:\n- name: ../a\n  addr: x:1\n",
		"token and file":    "contexts:\n- name: a\n  addr: x:1\n  token: t\n  token_file: /f\n",
		"not yaml":          "contexts: [\n",
		"too large":         "# " + strings.Repeat("x", maxSize) + "\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if cfg, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Load = %+v, %v; want an error naming the file", name, cfg, err)
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	if cfg, err := Load(path); err != nil || len(cfg.Contexts) != 0 {
		t.Fatalf("a missing file: %+v, %v", cfg, err)
	}
	cfg := &Config{}
	cfg.Set(Context{Name: "a", Addr: "http://a:1", Token: "tok"})
	cfg.Set(Context{Name: "b", Addr: "http://b:2", TokenFile: "/t"})
	cfg.Set(Context{Name: "a", Addr: "http://a:3", Token: "tok2"}) // replaces
	cfg.Current = "a"
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || len(got.Contexts) != 2 || got.Current != "a" {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	if a, ok := got.Get("a"); !ok || a.Addr != "http://a:3" || a.Token != "tok2" {
		t.Fatalf("a = %+v", a)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory made %v, %v; want 0700", fi.Mode(), err)
	}
	if !got.Remove("a") || got.Current != "" || got.Remove("a") {
		t.Fatalf("Remove: %+v", got)
	}
	got.Current = "missing"
	if err := got.Save(path); err == nil {
		t.Fatal("Save wrote a config whose current context is not defined")
	}
}
