package providertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tetherhq/tether/plugins/provider"
)

// FakeRunnerPackage is the import path of the stand-in runner the suite
// builds and hands providers.
const FakeRunnerPackage = "github.com/tetherhq/tether/plugins/providertest/fakerunner"

// Build compiles a main package (an import path, or a directory relative to
// the test's package) as a static binary into a temp dir and returns its
// path. ldflags may be empty.
func Build(t testing.TB, pkg, name, ldflags string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// OpenPlugin starts the provider plugin binary at path through go-plugin,
// exactly as the controller does, and closes it when the test ends. Its log
// goes to t.Log.
func OpenPlugin(t testing.TB, path string) *provider.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &logWriter{t: t}
	t.Cleanup(w.stop)
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Debug, Output: w})
	c, err := provider.Open(ctx, path, logger)
	if err != nil {
		t.Fatalf("open plugin %s: %v", path, err)
	}
	t.Cleanup(c.Close)
	return c
}

// logWriter sends log output to t.Log until the test ends.
type logWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(trimNewline(p)))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && p[len(p)-1] == '\n' {
		p = p[:len(p)-1]
	}
	return p
}
