package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/plugins/docker"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/plugins/providertest"
)

// engine connects to the Docker daemon, or skips the test when there is
// none (fails under CI, where .ci/run starts one).
func engine(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Docker daemon under CI: %v", err)
		}
		t.Skipf("skipping: no Docker daemon (%v); .ci/deps docker starts one", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// testImage returns an image with /bin/sh: the default runner image when
// present, else it is built with .ci/images from a fresh build.
func testImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	if _, err := cli.ImageInspect(context.Background(), docker.DefaultImage); err == nil {
		return docker.DefaultImage
	}
	bin := t.TempDir()
	for _, name := range []string{"tether", "tether-runner", "tether-provider-local", "tether-provider-docker"} {
		b := providertest.Build(t, "github.com/tetherhq/tether/cmd/"+name, name, "")
		if err := os.Rename(b, bin+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("../../.ci/images", bin, "runner")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf(".ci/images: %v\n%s", err, out)
	}
	return docker.DefaultImage
}

// The Docker provider passes the provider contract through its real plugin
// binary, against a real dockerd.
func TestProviderContract(t *testing.T) {
	cli := engine(t)
	image := testImage(t, cli)
	bin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-provider-docker", "tether-provider-docker", "")
	providertest.Run(t, func(t *testing.T) provider.Provider {
		return providertest.OpenPlugin(t, bin)
	}, providertest.Env{
		Config: provider.Config{StateDir: t.TempDir(), Options: map[string]string{"image": image}},
		BadConfigs: []provider.Config{
			{Options: map[string]string{"user": "root"}},
			{Options: map[string]string{"user": "0"}},
			{Options: map[string]string{"user": "65532:0"}},
			{Options: map[string]string{"network": "../x"}},
			{Options: map[string]string{"network": "none"}},
			{Options: map[string]string{"memory_mib": "1"}},
			{Options: map[string]string{"pids": "-1"}},
		},
		Resources: provider.Resources{CPUs: 0.5, MemoryMiB: 256, Pids: 128},
		// A container under the allocation's name without tether's labels.
		MakeForeign: func(t *testing.T, id string) {
			_, err := cli.ContainerCreate(context.Background(), client.ContainerCreateOptions{
				Name:   "tether-" + id,
				Config: &container.Config{Image: image, Cmd: []string{"/bin/sh", "-c", "exit 0"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = cli.ContainerRemove(context.Background(), "tether-"+id, client.ContainerRemoveOptions{Force: true})
			})
		},
		ForeignExists: func(t *testing.T, id string) bool {
			_, err := cli.ContainerInspect(context.Background(), "tether-"+id, client.ContainerInspectOptions{})
			return err == nil
		},
		Check: func(t *testing.T, alloc provider.Allocation, h providertest.Hello) {
			checkHardened(t, cli, alloc, h)
		},
		Leftovers: func(t *testing.T, id string) []string { return leftovers(t, cli, id) },
	})
}

// leftovers lists the containers and networks labelled with allocation id.
func leftovers(t *testing.T, cli *client.Client, id string) []string {
	t.Helper()
	f := make(client.Filters).Add("label", "tether.allocation="+id)
	cs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(context.Background(), client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range cs.Items {
		left = append(left, "container "+c.ID[:12])
	}
	for _, n := range ns.Items {
		left = append(left, "network "+n.Name)
	}
	return left
}

// checkHardened looks at the container the way an operator would.
func checkHardened(t *testing.T, cli *client.Client, alloc provider.Allocation, h providertest.Hello) {
	res, err := cli.ContainerInspect(context.Background(), "tether-"+alloc.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	hc := c.HostConfig
	if alloc.Root != "/workspace" {
		t.Errorf("root %s, want /workspace", alloc.Root)
	}
	if hc.Init == nil || !*hc.Init {
		t.Error("no init process")
	}
	// Docker may keep capability names as given or as CAP_X, in any order.
	var added []string
	for _, c := range hc.CapAdd {
		added = append(added, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	slices.Sort(added)
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(added, []string{"CHOWN", "KILL", "SETGID", "SETUID"}) {
		t.Errorf("capabilities: drop %v, add %v; want drop ALL, add SETUID, SETGID, KILL, CHOWN", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
	}
	if hc.NanoCPUs != 5e8 || hc.Memory != 256<<20 || hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("limits: cpus %d, memory %d, pids %v; want 0.5 CPU, 256 MiB, 128", hc.NanoCPUs, hc.Memory, hc.PidsLimit)
	}
	// A network of its own, labelled, and the controller's socket directory mounted read-only.
	if want := "tether-" + alloc.ID; string(hc.NetworkMode) != want || alloc.Info["network"] != "private" || alloc.Info["docker_network"] != want {
		t.Errorf("network mode %q, info %v; want the allocation's own network %s", hc.NetworkMode, alloc.Info, want)
	}
	nres, err := cli.NetworkInspect(context.Background(), "tether-"+alloc.ID, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("the allocation's network: %v", err)
	}
	if n := nres.Network; n.Driver != "bridge" || n.Internal || n.Labels["tether.allocation"] != alloc.ID || n.Labels["tether.provider"] != "docker" {
		t.Errorf("network %s: driver %s, internal %v, labels %v", n.Name, n.Driver, n.Internal, n.Labels)
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Target != "/run/tether/controller" || !hc.Mounts[0].ReadOnly || hc.Mounts[0].Type != "bind" {
		t.Errorf("mounts %+v; want the controller socket's directory, read-only, at /run/tether/controller", hc.Mounts)
	}
	if h.Via != "unix" || h.Getenv(provider.EnvControllerURL) != "unix:///run/tether/controller/runner.sock" {
		t.Errorf("the runner reached the controller by %s, with URL %q; want the mounted socket", h.Via, h.Getenv(provider.EnvControllerURL))
	}
	if c.Config.Labels["tether.allocation"] != alloc.ID || c.Config.Labels["tether.workspace"] != "ws-"+alloc.ID ||
		c.Config.Labels["providertest"] != "yes" {
		t.Errorf("labels %v", c.Config.Labels)
	}
	for _, kv := range c.Config.Env {
		if len(kv) > 20 && kv[:20] == "TETHER_RUNNER_TOKEN=" {
			t.Error("the bootstrap token is in the container's configuration")
		}
	}
	// The runner is the container's root; the agent is 65532 (its commands, its workspace).
	if h.UID != 0 || h.GID != 0 || c.Config.User != "0:0" {
		t.Errorf("runner runs as %d:%d (user %q), want the container's root", h.UID, h.GID, c.Config.User)
	}
	for k, want := range map[string]string{"TETHER_ISOLATION": "uid", "TETHER_AGENT_UID": "65532", "TETHER_AGENT_GID": "65532"} {
		if got := h.Getenv(k); got != want {
			t.Errorf("runner environment %s=%q, want %q", k, got, want)
		}
	}
	if alloc.Info["isolation"] != "uid" || alloc.Info["agent_user"] != "65532:65532" || alloc.Info["cpus"] != "0.5" ||
		alloc.Info["memory"] != "256 MiB" || alloc.Info["pids"] != "128" {
		t.Errorf("allocation info %v", alloc.Info)
	}
}

// A network under an allocation's name blocks its Create (conflict) and is never taken over:
// one the provider left (labelled as its own, without a container) goes at Destroy; one it did
// not make is left alone, even by Destroy. A failed Create leaves no network of its own.
func TestNetworkConflicts(t *testing.T) {
	cli := engine(t)
	image := testImage(t, cli)
	p := docker.New("test")
	ctx := context.Background()
	if err := p.Configure(ctx, provider.Config{StateDir: t.TempDir(), Options: map[string]string{"image": image}}); err != nil {
		t.Fatal(err)
	}
	sh, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	req := func(id string) provider.CreateRequest {
		return provider.CreateRequest{WorkspaceID: "ws-" + id, AllocationID: id, ControllerURL: "http://127.0.0.1:1",
			RunnerToken: "tok", RunnerBinary: sh, ControllerSocket: filepath.Join(t.TempDir(), "runner.sock")}
	}
	mk := func(id string, labels map[string]string) string {
		res, err := cli.NetworkCreate(ctx, "tether-"+id, client.NetworkCreateOptions{Driver: "bridge", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = cli.NetworkRemove(context.Background(), res.ID, client.NetworkRemoveOptions{}) })
		return res.ID
	}
	exists := func(id string) bool {
		_, err := cli.NetworkInspect(ctx, id, client.NetworkInspectOptions{})
		return err == nil
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)

	leaked := "nc-leaked-" + suffix
	lid := mk(leaked, map[string]string{"tether.provider": "docker", "tether.allocation": leaked})
	if _, err := p.Create(ctx, req(leaked)); provider.ErrorCode(err) != provider.CodeConflict {
		t.Fatalf("Create over a leaked network: %v, want conflict", err)
	}
	if !exists(lid) || len(leftovers(t, cli, leaked)) != 1 {
		t.Fatalf("after the refused Create: network there %v, leftovers %v", exists(lid), leftovers(t, cli, leaked))
	}
	if err := p.Destroy(ctx, leaked); err != nil {
		t.Fatal(err)
	}
	if exists(lid) {
		t.Fatal("Destroy left the provider's own leaked network")
	}

	foreign := "nc-foreign-" + suffix
	fid := mk(foreign, map[string]string{"someone": "else"})
	if _, err := p.Create(ctx, req(foreign)); provider.ErrorCode(err) != provider.CodeConflict {
		t.Fatalf("Create over a foreign network: %v, want conflict", err)
	}
	if left := leftovers(t, cli, foreign); len(left) != 0 {
		t.Fatalf("a refused Create left %v", left)
	}
	if err := p.Destroy(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if !exists(fid) {
		t.Fatal("Destroy removed a network the provider did not make")
	}
}
