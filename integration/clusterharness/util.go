package clusterharness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// BinDir holds the binaries under test (tether, tether-runner, tether-provider-local). Set it
// before New: the tests' TestMain sets it to TETHER_BIN_DIR or a fresh build, the bench to its
// -bin directory.
var BinDir string

func bin(name string) string { return filepath.Join(BinDir, name) }

// Bin is the path of one of the binaries under test.
func Bin(name string) string { return bin(name) }

// need skips t for want of what (a capability this machine lacks), or fails it when CI is set:
// there everything is installed, and a skip would hide a broken setup.
func need(t testing.TB, what string) {
	t.Helper()
	msg := "this test needs " + what
	if pgtest.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// requireNetworking checks for what the network needs: root and iproute2 with namespaces.
func requireNetworking(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		need(t, "root (it makes network namespaces, veth pairs and a bridge)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		need(t, "ip (Debian package iproute2)")
	}
}

// Eventually polls cond until it holds, failing t after within. Deadlines are generous bounds
// on liveness, not timing assertions; detail, when given, says what was last seen.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool, detail ...func() string) {
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

// Tail is the last n bytes of the file at path (a log), or why it cannot be read.
func Tail(path string, n int64) string {
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
