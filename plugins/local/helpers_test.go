package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// newConfigured returns a provider configured on a fresh state dir. Its runners are shell
// scripts, which cannot confine anything: isolation is none unless a test asks.
func newConfigured(t *testing.T) (*Provider, string) {
	t.Helper()
	return newConfiguredWith(t, map[string]string{"isolation": isolationNone})
}

func newConfiguredWith(t *testing.T, opts map[string]string) (*Provider, string) {
	t.Helper()
	p := New("test")
	stateDir := filepath.Join(t.TempDir(), "state")
	if err := p.Configure(context.Background(), provider.Config{StateDir: stateDir, Options: opts}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p, stateDir
}

// writeScript writes an executable shell script into its own directory, so
// tests can check that directory is prepended to the runner's PATH.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fake-runner")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func createReq(id, runner string, env map[string]string) provider.CreateRequest {
	return provider.CreateRequest{
		WorkspaceID:   "ws-1",
		AllocationID:  id,
		ControllerURL: "http://127.0.0.1:7420",
		RunnerToken:   "secret-token-" + id,
		RunnerBinary:  runner,
		Env:           env,
	}
}

// waitFile polls until path exists with content, so tests don't race the
// fake runner's first lines.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, path)))
	if err != nil {
		t.Fatalf("pid in %s: %v", path, err)
	}
	return pid
}

// alive reports whether pid exists and is not a zombie. Orphans may stay
// zombies when PID 1 (e.g. in a container) does not reap.
func alive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && !st.zombie()
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still alive", pid)
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("want *provider.Error with code %q, got %v", code, err)
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}
