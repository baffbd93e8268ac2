package provider_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tetherhq/tether/plugins/provider"
)

// buildLocalPlugin builds cmd/tether-provider-local, the real plugin binary.
func buildLocalPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tether-provider-local")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/tetherhq/tether/cmd/tether-provider-local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// testWriter sends log output to t.Log, so it shows only for failures.
type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func TestLocalPluginOverGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := buildLocalPlugin(t)
	logOut := &testWriter{t: t}
	defer logOut.stop()
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Debug, Output: logOut})

	c, err := provider.Open(ctx, bin, logger)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name != "local" || len(info.Capabilities) == 0 {
		t.Fatalf("Info = %+v", info)
	}

	// Before Configure: a typed precondition error, not a transport error.
	_, err = c.Create(ctx, provider.CreateRequest{AllocationID: "a1"})
	wantCode(t, err, provider.CodeFailedPrecondition)

	stateDir := filepath.Join(t.TempDir(), "providers", "local")
	// The fake runner below is a shell script, which cannot confine: no isolation asked.
	if err := c.Configure(ctx, provider.Config{StateDir: stateDir, Options: map[string]string{"isolation": "none"}}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	err = c.Configure(ctx, provider.Config{StateDir: "relative"})
	wantCode(t, err, provider.CodeInvalidArgument)

	runner := filepath.Join(t.TempDir(), "fake-runner")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	req := provider.CreateRequest{
		WorkspaceID:   "ws",
		AllocationID:  "../escape",
		ControllerURL: "http://127.0.0.1:7420",
		RunnerToken:   "tok",
		RunnerBinary:  runner,
	}
	_, err = c.Create(ctx, req)
	wantCode(t, err, provider.CodeInvalidArgument)

	req.AllocationID = "a1"
	alloc, err := c.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if alloc.ID != "a1" || alloc.Root != filepath.Join(stateDir, "a1", "root") || alloc.Info["pid"] == "" {
		t.Fatalf("Create = %+v", alloc)
	}
	_, err = c.Create(ctx, req)
	wantCode(t, err, provider.CodeConflict)

	if err := c.Destroy(ctx, "a1"); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "a1")); !os.IsNotExist(err) {
		t.Fatalf("allocation dir survived Destroy: %v", err)
	}

	// After Close the plugin is gone and calls fail as unavailable.
	c.Close()
	if !c.Exited() {
		t.Error("plugin still running after Close")
	}
	_, err = c.Info(ctx)
	wantCode(t, err, provider.CodeUnavailable)
}

func TestOpenErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := provider.Open(ctx, buildLocalPlugin(t), hclog.NewNullLogger())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v", err)
	}
	_, err = provider.Open(context.Background(), "/nonexistent/plugin", hclog.NewNullLogger())
	if err == nil {
		t.Fatal("Open of a missing binary succeeded")
	}
	// A binary that is not a plugin fails the handshake instead of hanging.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := provider.Open(ctx, "/bin/true", hclog.NewNullLogger()); err == nil {
		t.Fatal("Open of a non-plugin binary succeeded")
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("want *provider.Error with code %q, got %T %v", code, err, err)
	}
}

// Environment for the helper host process.
const (
	envHelperHost   = "TETHER_TEST_HELPER_HOST"
	envHelperPlugin = "TETHER_TEST_HELPER_PLUGIN"
)

// TestHelperHost is not a test: re-executed with envHelperHost set, the
// test binary becomes a controller stand-in that loads the plugin, prints
// its pid and waits to be killed.
func TestHelperHost(t *testing.T) {
	mode := os.Getenv(envHelperHost)
	if mode == "" {
		t.Skip("helper process for TestPluginDiesWithHost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := provider.OpenForTest(ctx, os.Getenv(envHelperPlugin), hclog.NewNullLogger(), mode == "pdeathsig")
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("PLUGIN_PID=%d\n", c.Pid())
	time.Sleep(time.Minute)
	os.Exit(0)
}

// The plugin must not outlive a SIGKILLed controller, both through
// Pdeathsig and, without it, through its own parent watchdog.
func TestPluginDiesWithHost(t *testing.T) {
	bin := buildLocalPlugin(t)
	for _, mode := range []string{"pdeathsig", "watchdog"} {
		t.Run(mode, func(t *testing.T) {
			host := exec.Command(os.Args[0], "-test.run=^TestHelperHost$", "-test.count=1")
			host.Env = append(os.Environ(), envHelperHost+"="+mode, envHelperPlugin+"="+bin)
			stdout, err := host.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := host.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = host.Process.Kill(); _ = host.Wait() }()

			pid := 0
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "PLUGIN_PID="); ok {
					pid, _ = strconv.Atoi(v)
					break
				}
				if strings.HasPrefix(sc.Text(), "ERROR") {
					t.Fatalf("helper host: %s", sc.Text())
				}
			}
			if pid <= 0 {
				t.Fatal("helper host did not report a plugin pid")
			}
			if !processAlive(pid) {
				t.Fatalf("plugin %d not running while its host is", pid)
			}

			if err := host.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = host.Wait()

			deadline := time.Now().Add(10 * time.Second)
			for processAlive(pid) {
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("plugin %d outlived its SIGKILLed host", pid)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// processAlive treats a zombie as dead: an orphaned plugin is reparented to
// PID 1, which in a container may never reap it.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
