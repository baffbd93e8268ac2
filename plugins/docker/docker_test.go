package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// The container's layout: the runner is root with its few capabilities, the agent's ids travel
// in the environment, and only a socket-dialing runner gets the socket's directory mounted.
func TestContainerLayout(t *testing.T) {
	opts := options.Resolve(map[string]string{"user": "1000:1001"})
	req := provider.CreateRequest{WorkspaceID: "ws", AllocationID: "al", ControllerURL: "http://127.0.0.1:1"}
	url := runnerURLFor("/data/run/runner.sock")
	if url != "unix:///run/tether/controller/runner.sock" {
		t.Fatalf("runner URL %q", url)
	}
	cc := containerConfig(req, opts, url)
	if cc.User != "0:0" {
		t.Errorf("user %q, want the container's root", cc.User)
	}
	env := strings.Join(cc.Env, "\n")
	for _, want := range []string{"TETHER_ISOLATION=uid", "TETHER_AGENT_UID=1000", "TETHER_AGENT_GID=1001"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	if cc.Labels[labelRunnerURL] != url || cc.Labels[labelNetworkMode] != "private" {
		t.Errorf("labels %v", cc.Labels)
	}
	lim, err := limitsFrom(opts, provider.Resources{})
	if err != nil || lim.memory != 2048<<20 || lim.nanoCPUs != 2e9 || lim.pids != 1024 {
		t.Fatalf("default limits %+v, %v", lim, err)
	}
	hc := hostConfig(opts, lim, "tether-al", "/data/run/runner.sock", url)
	if string(hc.NetworkMode) != "tether-al" || len(hc.Mounts) != 1 || hc.Mounts[0].Source != "/data/run" ||
		hc.Mounts[0].Target != controllerMount || !hc.Mounts[0].ReadOnly {
		t.Errorf("network %q, mounts %+v", hc.NetworkMode, hc.Mounts)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, runnerCaps) || !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("caps drop %v add %v, security %v", hc.CapDrop, hc.CapAdd, hc.SecurityOpt)
	}
	if hc := hostConfig(opts, lim, "host", "/data/run/runner.sock", "http://127.0.0.1:1"); len(hc.Mounts) != 0 {
		t.Errorf("a runner dialing TCP got mounts %+v", hc.Mounts)
	}
	if l, _ := limitsFrom(options.Resolve(map[string]string{"memory_mib": "0", "cpus": "0", "pids": "0"}), provider.Resources{}); l != (limits{}) {
		t.Errorf("0 should lift every limit: %+v", l)
	}
}

func TestCheckOptions(t *testing.T) {
	for _, bad := range []map[string]string{{"user": "0"}, {"user": "0:0"}, {"user": "65532:0"}, {"network": "none"}} {
		if err := checkOptions(options.Resolve(bad)); provider.ErrorCode(err) != provider.CodeInvalidArgument {
			t.Errorf("checkOptions(%v) = %v", bad, err)
		}
	}
	if err := checkOptions(options.Resolve()); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
}
