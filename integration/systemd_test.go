package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const systemdDir = "../deploy/systemd"

// unitRoot lays out a root as an installation would (deploy/systemd/tether.service's comment):
// the unit in /etc/systemd/system, the drop-ins given in tether.service.d, the binary under test
// at /usr/local/bin/tether, and the host's own units (sysinit.target, ...), which verify needs.
func unitRoot(t *testing.T, dropIns map[string]string) string {
	t.Helper()
	root := t.TempDir()
	etc := filepath.Join(root, "etc/systemd/system")
	for _, d := range []string{etc + "/tether.service.d", root + "/usr/local/bin", root + "/usr/lib/systemd"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", root+"/usr/lib/systemd/").CombinedOutput(); err != nil {
		t.Fatalf("copy the host's units: %v\n%s", err, out)
	}
	copyFile(t, filepath.Join(systemdDir, "tether.service"), filepath.Join(etc, "tether.service"), 0o644)
	copyFile(t, bin("tether"), filepath.Join(root, "usr/local/bin/tether"), 0o755)
	for name, content := range dropIns {
		if err := os.WriteFile(filepath.Join(etc, "tether.service.d", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// analyze runs systemd-analyze with --root and returns its combined output and exit status.
func analyze(t *testing.T, root string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("systemd-analyze", append(args, "--root="+root, "tether.service")...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("systemd-analyze: %v", err)
	}
	return string(out), 0
}

var exposureLine = regexp.MustCompile(`Overall exposure level for tether\.service: ([0-9.]+)`)

// TestSystemdUnit checks deploy/systemd as installed: systemd-analyze verify finds nothing to say
// about the unit alone or with the docker-only drop-in (a warning fails the test as an error
// does), and the security review's exposure stays within the figures the README gives.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but systemd-analyze is missing: .ci/deps systemd installs it")
		}
		t.Skip("no systemd-analyze: .ci/deps systemd installs it")
	}
	dockerOnly, err := os.ReadFile(filepath.Join(systemdDir, "docker-only.conf"))
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join(systemdDir, "tether.service"))
	if err != nil {
		t.Fatal(err)
	}
	// What the stop relies on, which verify cannot judge: SIGTERM to the controller alone (local
	// sandboxes outlive a restart) and time for its drain.
	for _, line := range []string{"KillMode=process", "KillSignal=SIGTERM", "TimeoutStopSec=60s", "ExecStart=/usr/local/bin/tether serve "} {
		if !strings.Contains(string(unit), "\n"+line) {
			t.Errorf("tether.service lacks %q", line)
		}
	}

	for _, c := range []struct {
		name        string
		dropIns     map[string]string
		maxExposure float64 // systemd-analyze security's 0 (locked down) .. 10 (exposed)
	}{
		{"local and docker", nil, 4.5},
		{"docker only", map[string]string{"docker-only.conf": string(dockerOnly)}, 2.0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := unitRoot(t, c.dropIns)
			if out, code := analyze(t, root, "verify"); code != 0 || strings.TrimSpace(out) != "" {
				t.Fatalf("systemd-analyze verify: exit %d\n%s", code, out)
			}
			out, code := analyze(t, root, "security", "--offline=yes")
			m := exposureLine.FindStringSubmatch(out)
			if code != 0 || m == nil {
				t.Fatalf("systemd-analyze security: exit %d\n%s", code, out)
			}
			exposure, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exposure %.1f", exposure)
			if exposure > c.maxExposure {
				t.Errorf("exposure %.1f, want at most %.1f:\n%s", exposure, c.maxExposure, out)
			}
		})
	}

	// The check can fail: a misspelt option is reported, a drop-in naming a missing binary too.
	for name, dropIn := range map[string]string{
		"unknown key": "[Service]\nProtectSytem=strict\n",
		"bad binary":  "[Service]\nExecStart=\nExecStart=/usr/local/bin/tether-missing serve\n",
	} {
		t.Run("reports "+name, func(t *testing.T) {
			out, code := analyze(t, unitRoot(t, map[string]string{"broken.conf": dropIn}), "verify")
			if code == 0 && strings.TrimSpace(out) == "" {
				t.Fatalf("systemd-analyze verify said nothing about %q", dropIn)
			}
		})
	}
}
