package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/plugins/providertest"
	"github.com/tetherhq/tether/protocol"
)

// TestCreateIsolatesByDefault creates with no options and the real runner binary: the provider
// proves the host can confine, gives the workspace to the agent's own host uid (when root),
// tells the runner how to confine, and reports it.
func TestCreateIsolatesByDefault(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfiguredWith(t, nil)
	runner := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-runner", "tether-runner", "")
	alloc, err := p.Create(ctx, createReq("iso1", runner, nil))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "iso1") })
	if alloc.Info["isolation"] != protocol.IsolationNamespaces {
		t.Fatalf("allocation info %v: want isolation namespaces", alloc.Info)
	}
	dir := filepath.Join(stateDir, "iso1")
	m, err := readMarker(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := isolationEnv(dir, m)
	if env[protocol.EnvIsolation] != protocol.IsolationNamespaces || env[protocol.EnvSandboxDir] != filepath.Join(dir, sandboxDirName) {
		t.Errorf("runner env %v", env)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(alloc.Root, &st); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		uid, _ := strconv.Atoi(alloc.Info["agent_uid"])
		if uid < agentIDBase || int(st.Uid) != uid || env[protocol.EnvAgentUID] != alloc.Info["agent_uid"] {
			t.Errorf("root owned by %d, agent uid %q (env %v): want one unprivileged uid ≥ %d for both", st.Uid, alloc.Info["agent_uid"], env, agentIDBase)
		}
	} else if int(st.Uid) != os.Getuid() {
		t.Errorf("root owned by %d, want the controller's %d", st.Uid, os.Getuid())
	}
	for _, d := range []string{"mnt", "tmp", "home"} {
		if fi, err := os.Lstat(filepath.Join(dir, sandboxDirName, d)); err != nil || !fi.IsDir() {
			t.Errorf("sandbox dir %s: %v", d, err)
		}
	}
}

// TestCreateRefusesWhatCannotBeConfined: a runner that cannot confine fails the create with
// provider_failed naming the way out, and leaves nothing behind.
func TestCreateRefusesWhatCannotBeConfined(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfiguredWith(t, nil)
	runner := writeScript(t, `[ "$1" = `+protocol.ConfineProbeArg+` ] && { echo "unshare: operation not permitted" >&2; exit 1; }; exec sleep 300`+"\n")
	_, err := p.Create(ctx, createReq("iso2", runner, nil))
	wantCode(t, err, "provider_failed")
	if !strings.Contains(err.Error(), "isolation=none") || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("error does not say why or what to do: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(stateDir, "iso2")); !os.IsNotExist(err) {
		t.Errorf("a refused create left its directory: %v", err)
	}
	// A failed probe is not remembered: the next create probes, and is refused, again.
	_, err = p.Create(ctx, createReq("iso2b", runner, nil))
	wantCode(t, err, "provider_failed")
	// Asked for explicitly, no isolation starts the same runner, and says so.
	alloc, err := p.Create(ctx, withOptions(createReq("iso3", runner, nil), map[string]string{"isolation": "none"}))
	if err != nil {
		t.Fatalf("Create isolation=none: %v", err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "iso3") })
	if alloc.Info["isolation"] != "none" {
		t.Errorf("allocation info %v: want isolation none", alloc.Info)
	}
}

func withOptions(req provider.CreateRequest, opts map[string]string) provider.CreateRequest {
	req.Options = opts
	return req
}
