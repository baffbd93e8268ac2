// Package cluster tests several controllers sharing one PostgreSQL and one S3 bucket behind a
// real HAProxy, each controller in a network namespace of its own on a test bridge, with real
// runners of the local provider dialing the balancer. The harness (integration/clusterharness,
// shared with the bench) builds all of it; the tests drive it through the balancer with the Go
// client and the tether CLI.
//
// It needs root (namespaces, links), iproute2, haproxy, PostgreSQL's server binaries and MinIO:
// `.ci/deps` installs them. Without them the tests skip, saying what is missing — or fail when
// CI is set.
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
	h "github.com/tetherhq/tether/integration/clusterharness"
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration/cluster:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// run points the harness at the binaries under test: TETHER_BIN_DIR (make test builds them) or
// a fresh build.
func run(m *testing.M) (int, error) {
	h.BinDir = os.Getenv("TETHER_BIN_DIR")
	if h.BinDir == "" {
		dir, err := os.MkdirTemp("", "tether-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+"/", "../../cmd/tether", "../../cmd/tether-runner", "../../cmd/tether-provider-local", "../../cmd/tether-provider-docker")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build binaries: %v\n%s", err, out)
		}
		h.BinDir = dir
	}
	// pgtest.Main stops the PostgreSQL server the tests started.
	return pgtest.Main(m), nil
}

// eventually is the harness's poll with a deadline, for brevity.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	h.Eventually(t, within, what, cond, detail...)
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
		if pgtest.InCI() {
			t.Fatal("this test needs docker (the Docker provider's workspaces)")
		}
		t.Skip("this test needs docker (the Docker provider's workspaces)")
	}
	runnerImage.once.Do(func() {
		runnerImage.out, runnerImage.err = exec.Command("../../.ci/images", h.BinDir, "runner").CombinedOutput()
	})
	if runnerImage.err != nil {
		t.Fatalf("build tether-runner:dev: %v\n%s", runnerImage.err, runnerImage.out)
	}
}
