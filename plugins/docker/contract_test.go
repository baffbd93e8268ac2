package docker_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
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
	})
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
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("capabilities: drop %v, add %v; want drop ALL, add none", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
	}
	if hc.NanoCPUs != 5e8 || hc.Memory != 256<<20 || hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("limits: cpus %d, memory %d, pids %v; want 0.5 CPU, 256 MiB, 128", hc.NanoCPUs, hc.Memory, hc.PidsLimit)
	}
	if hc.NetworkMode != "host" {
		t.Errorf("network mode %q, want host", hc.NetworkMode)
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
	if h.UID != 65532 || h.GID != 65532 {
		t.Errorf("runner runs as %d:%d, want the unprivileged 65532:65532", h.UID, h.GID)
	}
}
