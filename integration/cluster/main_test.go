// Package cluster tests several controllers sharing one PostgreSQL and one S3 bucket behind a
// real HAProxy, each controller in a network namespace of its own on a test bridge, with real
// runners of the local provider dialing the balancer. The harness (New) builds all of it; the
// tests drive it through the balancer with the Go client and the tether CLI.
//
// It needs root (namespaces, links), iproute2, haproxy, PostgreSQL's server binaries and MinIO:
// `.ci/deps` installs them. Without them the tests skip, saying what is missing — or fail when
// CI is set.
package cluster

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// binDir holds the binaries under test: TETHER_BIN_DIR (make test builds them) or a fresh build.
var binDir string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration/cluster:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	binDir = os.Getenv("TETHER_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "tether-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+"/", "../../cmd/tether", "../../cmd/tether-runner", "../../cmd/tether-provider-local")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build binaries: %v\n%s", err, out)
		}
		binDir = dir
	}
	// pgtest.Main stops the PostgreSQL server the tests started.
	return pgtest.Main(m), nil
}

func bin(name string) string { return filepath.Join(binDir, name) }

// need skips t for want of what (a capability this machine lacks), or fails it when CI is set:
// there everything is installed, and a skip would hide a broken setup.
func need(t *testing.T, what string) {
	t.Helper()
	msg := "this test needs " + what
	if pgtest.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// requireNetworking checks for what the network needs: root and iproute2 with namespaces.
func requireNetworking(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		need(t, "root (it makes network namespaces, veth pairs and a bridge)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		need(t, "ip (Debian package iproute2)")
	}
}

// eventually polls cond until it holds, failing t after within. Deadlines are generous bounds
// on liveness, not timing assertions; detail, when given, says what was last seen.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("timed out after %s waiting for %s", within, what)
			for _, d := range detail {
				msg += ": " + d()
			}
			t.Fatal(msg)
		}
		<-tick.C
	}
}

// tail is the last n bytes of the file at path (a log), or why it cannot be read.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		if _, err := f.Seek(-n, io.SeekEnd); err != nil {
			return err.Error()
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

var runnerImage struct {
	once sync.Once
	err  error
	out  []byte
}

// needRunnerImage builds the Docker provider's default image (tether-runner:dev) once per test
// binary, FROM scratch out of the binaries under test — always, so the containers run the runner
// being tested rather than whatever image an earlier build left.
func needRunnerImage(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		need(t, "docker (the Docker provider's workspaces)")
	}
	runnerImage.once.Do(func() {
		runnerImage.out, runnerImage.err = exec.Command("../../.ci/images", binDir, "runner").CombinedOutput()
	})
	if runnerImage.err != nil {
		t.Fatalf("build tether-runner:dev: %v\n%s", runnerImage.err, runnerImage.out)
	}
}
