package providers

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// buildPlugin builds a provider plugin main into dir as tether-provider-<name>.
func buildPlugin(t *testing.T, dir, pkg, name string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, pluginPrefix+name), pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
}

func testProviderSet(t *testing.T) (*Set, string) {
	t.Helper()
	dir := t.TempDir()
	set := New(dir, filepath.Join(t.TempDir(), "providers"), nil, slog.New(slog.DiscardHandler))
	t.Cleanup(set.Close)
	runner := filepath.Join(t.TempDir(), "fake-runner")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return set, runner
}

// createReq asks for no isolation: the fake runner is a shell script, which cannot confine.
func createReq(ws, id, runner string) provider.CreateRequest {
	return provider.CreateRequest{WorkspaceID: ws, AllocationID: id, ControllerURL: "http://127.0.0.1:1",
		RunnerToken: "tok-" + id, RunnerBinary: runner, Options: map[string]string{"isolation": "none"}}
}

// A plugin process killed between two operations is noticed on the next one and restarted:
// the second create succeeds, and the new process manages what the old one made.
func TestPluginRestartedAfterKill(t *testing.T) {
	set, runner := testProviderSet(t)
	buildPlugin(t, set.dir, "github.com/tetherhq/tether/cmd/tether-provider-local", "local")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prov, err := set.Get(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Create(ctx, createReq("ws", "a1", runner)); err != nil {
		t.Fatalf("first create: %v", err)
	}
	h := prov.(*pluginHandle)
	pid := h.client.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Create(ctx, createReq("ws", "a2", runner)); err != nil {
		t.Fatalf("create after the plugin was killed: %v", err)
	}
	if h.client.Pid() == pid {
		t.Fatal("the plugin was not restarted")
	}
	for _, id := range []string{"a1", "a2"} {
		if st, err := prov.Inspect(ctx, id); err != nil || st.State != provider.StateRunning {
			t.Fatalf("Inspect(%s) after the restart = %+v, %v", id, st, err)
		}
		if err := prov.Destroy(ctx, id); err != nil {
			t.Fatalf("Destroy(%s): %v", id, err)
		}
	}
}

// A plugin that dies during an operation fails that operation as unavailable, with its last
// stderr lines (here, its panic), and the next operation runs on a new plugin process.
func TestPluginCrashDuringOperation(t *testing.T) {
	set, runner := testProviderSet(t)
	buildPlugin(t, set.dir, "./testdata/crashprovider", "crashy")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prov, err := set.Get(ctx, "crashy")
	if err != nil {
		t.Fatal(err)
	}
	pid := prov.(*pluginHandle).client.Pid()
	_, err = prov.Create(ctx, createReq("crash", "c1", runner))
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != provider.CodeUnavailable {
		t.Fatalf("create on a crashing plugin: %v, want unavailable", err)
	}
	for _, want := range []string{"died during Create", "about to fail on purpose", "panic: crash requested by the test"} {
		if !strings.Contains(pe.Message, want) {
			t.Errorf("error lacks %q:\n%q", want, pe.Message)
		}
	}
	a, err := prov.Create(ctx, createReq("ws", "c2", runner))
	if err != nil {
		t.Fatalf("create after the crash: %v", err)
	}
	if got := prov.(*pluginHandle).client.Pid(); got == pid {
		t.Fatal("the crashed plugin was not replaced")
	}
	if err := prov.Destroy(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
}

// Discover lists executables named tether-provider-<name>; Info works without configuring.
func TestProviderDiscoverAndInfo(t *testing.T) {
	set, _ := testProviderSet(t)
	buildPlugin(t, set.dir, "github.com/tetherhq/tether/cmd/tether-provider-local", "local")
	for _, f := range []string{"tether-provider-Bad", "tether-provider-noexec", "other"} {
		if err := os.WriteFile(filepath.Join(set.dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names, err := set.Discover()
	if err != nil || strings.Join(names, ",") != "local" {
		t.Fatalf("Discover = %v, %v", names, err)
	}
	info, path, err := set.Info(context.Background(), "local")
	if err != nil || info.Name != "local" || path != filepath.Join(set.dir, "tether-provider-local") || info.ConfigSchema == "" {
		t.Fatalf("Info = %+v, %s, %v", info, path, err)
	}
}

func TestCrashLines(t *testing.T) {
	stack := []string{"a", "b", "log before", "panic: x", "goroutine 1", "f1", "f2", "f3", "f4"}
	got := strings.Join(crashLines(stack, 4), "|")
	if got != "b|log before|panic: x|goroutine 1|..." {
		t.Fatalf("crashLines(panic) = %s", got)
	}
	if got := strings.Join(crashLines([]string{"1", "2", "3", "4", "5"}, 2), "|"); got != "...|4|5" {
		t.Fatalf("crashLines(plain) = %s", got)
	}
	if got := crashLines([]string{"1"}, 2); len(got) != 1 {
		t.Fatalf("crashLines(short) = %v", got)
	}
}
