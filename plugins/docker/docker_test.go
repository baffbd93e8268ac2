package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/plugins/provider"
)

func TestCheckReachable(t *testing.T) {
	cases := []struct {
		network, url string
		ok           bool
	}{
		{"host", "http://127.0.0.1:7420", true},
		{"tether", "http://10.0.0.5:7420", true},
		{"tether", "http://127.0.0.1:7420", false},
		{"tether", "http://localhost:7420", false},
		{"tether", "http://[::1]:7420", false},
		{"none", "http://10.0.0.5:7420", false},
	}
	for _, c := range cases {
		err := checkReachable(c.network, c.url)
		if (err == nil) != c.ok || (err != nil && provider.ErrorCode(err) != provider.CodeInvalidArgument) {
			t.Errorf("checkReachable(%s, %s) = %v", c.network, c.url, err)
		}
	}
}

// The boot environment file is sourced by /bin/sh: values come back byte for byte, nothing in
// them is expanded or run.
func TestBootEnvFileQuoting(t *testing.T) {
	dir := t.TempDir()
	token := `tok'"$(touch pwned)` + "`x`$HOME\\"
	url := "http://h:1/p?a=1&b='2'"
	env := filepath.Join(dir, "env")
	if err := os.WriteFile(env, bootEnvFile(url, token), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/bin/sh", "-c", `set -a; . "$1"; set +a; printf '%s\n%s' "$TETHER_CONTROLLER_URL" "$TETHER_RUNNER_TOKEN"`, "sh", env).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != url+"\n"+token {
		t.Fatalf("sourced back %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("the token was executed")
	}
}

func TestParseUserAndLimits(t *testing.T) {
	if u, g := parseUser("1000"); u != 1000 || g != 1000 {
		t.Errorf("parseUser(1000) = %d:%d", u, g)
	}
	if u, g := parseUser("1:2"); u != 1 || g != 2 {
		t.Errorf("parseUser(1:2) = %d:%d", u, g)
	}
	l, err := limitsFrom(map[string]string{"cpus": "1.5", "memory_mib": "512", "pids": "100"}, provider.Resources{Pids: 7})
	if err != nil || l.nanoCPUs != 15e8 || l.memory != 512<<20 || l.pids != 7 {
		t.Errorf("limitsFrom = %+v, %v", l, err)
	}
	if _, err := limitsFrom(nil, provider.Resources{CPUs: -1}); provider.ErrorCode(err) != provider.CodeInvalidArgument {
		t.Errorf("negative CPUs accepted: %v", err)
	}
}
