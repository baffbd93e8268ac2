package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/controller/api"
)

// dockerImage is the Docker provider's default image, built by .ci/images from ./bin.
const dockerImage = "tether-runner:dev"

var buildImageOnce sync.Once

// dockerEngine connects to the Docker daemon through the Engine API, or skips the test saying
// why (under CI, where .ci/run starts dockerd, it fails instead). It makes sure the runner image
// exists, building it FROM scratch out of the binaries under test: nothing is pulled.
func dockerEngine(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but Docker is not reachable: %v", err)
		}
		t.Skipf("skipping Docker test: no Docker daemon reachable (%v); `.ci/deps docker` installs and starts one", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	var buildErr error
	buildImageOnce.Do(func() {
		if _, err := cli.ImageInspect(context.Background(), dockerImage); err == nil {
			return
		}
		out, err := exec.Command("../.ci/images", binDir, "runner").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf(".ci/images:\n%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build %s: %v", dockerImage, buildErr)
	}
	return cli
}

// networksOf lists the networks labelled with the allocation.
func networksOf(t *testing.T, cli *client.Client, allocation string) []string {
	t.Helper()
	res, err := cli.NetworkList(context.Background(), client.NetworkListOptions{
		Filters: make(client.Filters).Add("label", "tether.allocation="+allocation),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range res.Items {
		names = append(names, n.Name)
	}
	return names
}

// containersOf lists the containers (running or not) labelled with the allocation.
func containersOf(t *testing.T, cli *client.Client, allocation string) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", "tether.allocation="+allocation),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range res.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}

// startDockerController starts a controller and, when the test ends after the controller's own
// cleanup, force-removes any container still labelled with its URL: a failed test leaks none.
func startDockerController(t *testing.T, cli *client.Client, opts ...serveOpts) *controllerProc {
	t.Helper()
	var url string
	t.Cleanup(func() {
		if url == "" {
			return
		}
		res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
			All: true, Filters: make(client.Filters).Add("label", "tether.controller-url="+url),
		})
		if err != nil {
			return
		}
		for _, ct := range res.Items {
			t.Logf("removing leftover container %v", ct.Names)
			_, _ = cli.ContainerRemove(context.Background(), ct.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
		nets, err := cli.NetworkList(context.Background(), client.NetworkListOptions{
			Filters: make(client.Filters).Add("label", "tether.controller-url="+url),
		})
		if err != nil {
			return
		}
		for _, n := range nets.Items {
			t.Logf("removing leftover network %s", n.Name)
			_, _ = cli.NetworkRemove(context.Background(), n.ID, client.NetworkRemoveOptions{})
		}
	})
	var o serveOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	c := startController(t, o)
	url = c.Addr
	return c
}

func (c *controllerProc) createOn(t *testing.T, provider string, extra ...string) api.Workspace {
	t.Helper()
	out := c.mustCLI(t, append([]string{"workspace", "create", "--provider", provider, "--json"}, extra...)...)
	var ws api.Workspace
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("workspace create --json printed %q: %v", out, err)
	}
	if ws.State != api.StateReady || ws.Provider != provider {
		t.Fatalf("unexpected workspace %+v", ws)
	}
	return ws
}

// treeListing describes the workspace tree from inside it with nothing but POSIX sh and the
// tools busybox and coreutils share: type, path, mode, content hash or link target. .git is left
// out (a snapshot normalizes it), and so is the root itself, whose mode is the provider's.
const treeListing = `find . -mindepth 1 -path ./.git -prune -o -print | LC_ALL=C sort | while IFS= read -r f; do
if [ -L "$f" ]; then echo "L $f -> $(readlink "$f")"
elif [ -f "$f" ]; then echo "F $f $(stat -c %a "$f") $(sha256sum < "$f" | cut -d' ' -f1)"
else echo "D $f $(stat -c %a "$f")"; fi; done`

// fillTree makes files, modes, a symlink, a binary file and a Git commit in a workspace.
const fillTree = `set -e
mkdir -p src/deep/er docs
printf 'package main\n' > src/main.go
printf '\000\001\002binary\377' > src/blob.bin
printf '#!/bin/sh\necho hi\n' > run.sh && chmod 0755 run.sh
chmod 0700 src/deep
echo notes > docs/notes.txt
ln -s ../src/main.go docs/link
echo made-in-$1 > origin.txt`

func (c *controllerProc) listing(t *testing.T, id string) string {
	t.Helper()
	return c.mustCLI(t, "exec", id, "--", "sh", "-c", treeListing)
}

// CI boots runners in local containers: a workspace in Docker is created ready, runs commands
// inside the container as its unprivileged user in /workspace, moves files, snapshots, and is
// removed with its container and its network.
func TestDockerWorkspaceLifecycle(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")
	if names := containersOf(t, cli, ws.AllocationID); len(names) != 1 || names[0] != "/tether-"+ws.AllocationID {
		t.Fatalf("containers of %s: %v", ws.AllocationID, names)
	}

	out := c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "id; pwd; cat /proc/1/comm")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "uid=65532") || lines[1] != "/workspace" || lines[2] != "docker-init" {
		t.Fatalf("id; pwd; init in the container said:\n%s", out)
	}
	// Hardened: the agent's commands have no capabilities at all, and no way to gain privileges
	// (the bounding set is the runner's few, which no-new-privileges keeps out of reach).
	status := c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("process status lacks %q:\n%s", want, status)
		}
	}

	local := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(local, []byte("hello docker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "files", "mkdir", ws.ID, "dir")
	c.mustCLI(t, "files", "put", ws.ID, local, "dir/in.txt")
	if got := c.mustCLI(t, "exec", ws.ID, "--", "cat", "/workspace/dir/in.txt"); got != "hello docker\n" {
		t.Fatalf("file put into the container reads %q", got)
	}
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo from the container > out.txt")
	if got := c.mustCLI(t, "files", "get", ws.ID, "out.txt"); got != "from the container\n" {
		t.Fatalf("files get = %q", got)
	}
	c.snapshot(t, ws.ID)

	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 1 || nets[0] != "tether-"+ws.AllocationID {
		t.Fatalf("networks of %s: %v", ws.AllocationID, nets)
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
	if names := containersOf(t, cli, ws.AllocationID); len(names) != 0 {
		t.Fatalf("containers left after workspace rm: %v", names)
	}
	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 0 {
		t.Fatalf("networks left after workspace rm: %v", nets)
	}
}

// gitSource makes a host directory with a Git repository: a commit on a branch, a staged change,
// an unstaged one and an untracked file.
func gitSource(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "work")
	write("README", "v1\n")
	write("staged.txt", "s1\n")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	write("staged.txt", "s2\n")
	git("add", "staged.txt")
	write("README", "v2, unstaged\n")
	write("untracked.txt", "new\n")
	return dir
}

func (c *controllerProc) snapshot(t *testing.T, id string) api.Snapshot {
	t.Helper()
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", id, "--json")), &snap); err != nil || snap.ID == "" {
		t.Fatalf("snapshot create %s: %v", id, err)
	}
	return snap
}

// A snapshot captured in Docker restores on the local provider, and one captured locally
// restores in Docker, with identical contents (paths, types, modes, bytes, link targets) and the
// same Git state (HEAD, branch, staged, unstaged and untracked changes).
func TestDockerSnapshotsMoveBetweenProviders(t *testing.T) {
	cli := dockerEngine(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is needed to make the source repository")
	}
	c := startDockerController(t, cli)
	source := gitSource(t)
	for _, dir := range []struct{ from, to string }{{"docker", "local"}, {"local", "docker"}} {
		t.Run(dir.from+"_to_"+dir.to, func(t *testing.T) {
			src := c.createOn(t, dir.from, "--source", source)
			c.mustCLI(t, "exec", src.ID, "--", "sh", "-c", fillTree, "fill", dir.from)
			want := c.listing(t, src.ID)
			if !strings.Contains(want, "L ./docs/link -> ../src/main.go") || !strings.Contains(want, "F ./run.sh 755") ||
				!strings.Contains(want, "F ./untracked.txt") {
				t.Fatalf("source tree is not what gitSource and fillTree make:\n%s", want)
			}
			snap := c.snapshot(t, src.ID)
			var g struct {
				Head, Branch                string
				Staged, Unstaged, Untracked int
			}
			if err := json.Unmarshal(snap.Git, &g); err != nil || g.Head == "" || g.Branch != "work" ||
				g.Staged == 0 || g.Unstaged == 0 || g.Untracked == 0 {
				t.Fatalf("snapshot Git state %s: want HEAD on branch work with staged, unstaged and untracked changes", snap.Git)
			}
			var dst api.Workspace
			out := c.mustCLI(t, "snapshot", "restore", snap.ID, "--provider", dir.to, "--json")
			if err := json.Unmarshal([]byte(out), &dst); err != nil || dst.Provider != dir.to {
				t.Fatalf("restore on %s: %v %s", dir.to, err, out)
			}
			if got := c.listing(t, dst.ID); got != want {
				t.Fatalf("restored on %s:\n%s\nwant (captured on %s):\n%s", dir.to, got, dir.from, want)
			}
			if again := c.snapshot(t, dst.ID); !sameJSON(again.Git, snap.Git) {
				t.Fatalf("Git state on %s: %s\nwant (captured on %s): %s", dir.to, again.Git, dir.from, snap.Git)
			}
			for _, ws := range []api.Workspace{src, dst} {
				c.mustCLI(t, "workspace", "rm", ws.ID)
				if ws.Provider == "docker" && len(containersOf(t, cli, ws.AllocationID)) != 0 {
					t.Fatalf("container of %s left after rm", ws.ID)
				}
			}
		})
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// --provider-opt reaches the provider: another agent user, other limits (applied, recorded and
// shown), and an image that is not there fails plainly (tether never pulls) and leaves no
// container and no network.
func TestDockerProviderOptions(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker", "--provider-opt", "user=4242:4243", "--provider-opt", "pids=64",
		"--provider-opt", "memory_mib=512", "--provider-opt", "cpus=1")
	if out := c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "id -u; id -g; cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"); out != "4242\n4243\n64\n" {
		t.Fatalf("uid, gid, pids.max in the container: %q", out)
	}
	res, err := cli.ContainerInspect(context.Background(), "tether-"+ws.AllocationID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hc := res.Container.HostConfig; hc.Memory != 512<<20 || hc.NanoCPUs != 1e9 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("limits: memory %d, cpus %d, pids %v; want 512 MiB, 1, 64", hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	info := c.showWorkspace(t, ws.ID).AllocationInfo
	if info["memory"] != "512 MiB" || info["cpus"] != "1" || info["pids"] != "64" || info["agent_user"] != "4242:4243" {
		t.Errorf("allocation info %v", info)
	}
	if r := c.cli(t, nil, "workspace", "create", "--provider", "docker", "--provider-opt", "user=0:0"); r.Code == 0 || !strings.Contains(r.Stderr, "never runs as root") {
		t.Errorf("create with a root agent: exit %d\n%s", r.Code, r.Stderr)
	}

	r := c.cli(t, nil, "workspace", "create", "--provider", "docker", "--provider-opt", "image=tether-no-such-image:dev", "--json")
	if r.Code == 0 || !strings.Contains(r.Stderr, "never pulls") {
		t.Fatalf("create with a missing image: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var failed api.Workspace
	if err := json.Unmarshal([]byte(r.Stdout), &failed); err != nil || failed.State != api.StateFailed {
		t.Fatalf("failed create printed %q", r.Stdout)
	}
	if names := containersOf(t, cli, failed.AllocationID); len(names) != 0 {
		t.Fatalf("a failed create left containers: %v", names)
	}
	if nets := networksOf(t, cli, failed.AllocationID); len(nets) != 0 {
		t.Fatalf("a failed create left networks: %v", nets)
	}
	r = c.cli(t, nil, "workspace", "create", "--provider", "docker", "--provider-opt", "no-such-option=1")
	if r.Code == 0 || !strings.Contains(r.Stderr, "unknown option") {
		t.Fatalf("create with an unknown option: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := c.cli(t, nil, "workspace", "create", "--provider-opt", "novalue"); r.Code == 0 || !strings.Contains(r.Stderr, "KEY=VALUE") {
		t.Fatalf("--provider-opt without '=': exit %d\n%s", r.Code, r.Stderr)
	}
}

// `tether provider ls` shows the plugins next to tether, their versions and config schemas.
func TestProviderLs(t *testing.T) {
	c := startController(t, serveOpts{})
	var list []api.ProviderInfo
	if err := json.Unmarshal([]byte(c.mustCLI(t, "provider", "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]api.ProviderInfo{}
	for _, p := range list {
		got[p.Name] = p
	}
	for _, name := range []string{"local", "docker"} {
		p, ok := got[name]
		if !ok || p.Error != "" || p.Version == "" || len(p.Capabilities) == 0 || !json.Valid(p.ConfigSchema) {
			t.Fatalf("provider %s: %+v", name, p)
		}
	}
	var schema struct {
		Properties map[string]struct{ Default string } `json:"properties"`
	}
	if err := json.Unmarshal(got["docker"].ConfigSchema, &schema); err != nil || schema.Properties["image"].Default != dockerImage {
		t.Fatalf("docker schema: %v %s", err, got["docker"].ConfigSchema)
	}
	human := c.mustCLI(t, "provider", "ls")
	for _, want := range []string{"NAME", "docker", "local", "image", "--provider-opt"} {
		if !strings.Contains(human, want) {
			t.Errorf("provider ls lacks %q:\n%s", want, human)
		}
	}
}
