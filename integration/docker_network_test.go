package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/controller/api"
)

// hostLoopbackService listens on the host's 127.0.0.1 and greets every connection with a line
// only it sends: a container that reads the line reached the host's loopback.
func hostLoopbackService(t *testing.T) (port int, banner string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	banner = "host-loopback-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(banner + "\n"))
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, banner
}

// reach runs, as the agent inside the workspace, a TCP connection to host:port (busybox nc,
// two seconds at most) sending an HTTP request, and returns what came back.
func (c *controllerProc) reach(t *testing.T, ws, host string, port int) string {
	t.Helper()
	r := c.cli(t, nil, "exec", ws, "--", "sh", "-c",
		`printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 2 "$1" "$2" 2>&1; echo "exit=$?"`, "sh", host, strconv.Itoa(port))
	return r.Stdout + r.Stderr
}

func controllerPort(t *testing.T, c *controllerProc) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(c.Addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// A controller started plainly on 127.0.0.1 gets a Docker workspace with default options
// connected, through its runner socket: the workspace's own network has no route to the host's
// loopback, so neither the controller's port nor another service there is in the agent's
// reach, nor is the socket. The defaults (network, limits, isolation) are applied, recorded and
// shown, and the network goes with the workspace.
func TestDockerDefaultsIsolate(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	port, banner := hostLoopbackService(t)
	// The test's own check that the service answers: from the host it does.
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err != nil {
		t.Fatal(err)
	} else {
		conn.Close()
	}
	ws := c.createOn(t, "docker")
	info := c.showWorkspace(t, ws.ID).AllocationInfo
	network := "tether-" + ws.AllocationID
	for k, want := range map[string]string{"network": "private", "docker_network": network, "memory": "2048 MiB",
		"pids": "1024", "isolation": "uid", "agent_user": "65532:65532"} {
		if info[k] != want {
			t.Errorf("allocation info %s = %q, want %q (all: %v)", k, info[k], want, info)
		}
	}
	if !strings.Contains(info["runner_connects"], "unix:///run/tether/controller/runner.sock") {
		t.Errorf("runner_connects = %q, want the controller's runner socket", info["runner_connects"])
	}
	show := c.mustCLI(t, "workspace", "show", ws.ID)
	for _, want := range []string{"network:", "private", "memory:", "2048 MiB", "isolation:"} {
		if !strings.Contains(show, want) {
			t.Errorf("workspace show lacks %q:\n%s", want, show)
		}
	}

	// The container as the Engine sees it: limits, its own network, the socket's directory.
	res, err := cli.ContainerInspect(context.Background(), "tether-"+ws.AllocationID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := res.Container.HostConfig
	sys, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantCPUs := min(int64(2e9), int64(sys.Info.NCPU)*1e9)
	if hc.Memory != 2<<30 || hc.NanoCPUs != wantCPUs || hc.PidsLimit == nil || *hc.PidsLimit != 1024 {
		t.Errorf("limits: memory %d, cpus %d, pids %v; want 2 GiB, %d, 1024", hc.Memory, hc.NanoCPUs, hc.PidsLimit, wantCPUs)
	}
	if string(hc.NetworkMode) != network || len(hc.Mounts) != 1 || hc.Mounts[0].Source != filepath.Join(c.Data, "run") ||
		hc.Mounts[0].Target != "/run/tether/controller" {
		t.Errorf("network %q, mounts %+v", hc.NetworkMode, hc.Mounts)
	}
	nres, err := cli.NetworkInspect(context.Background(), network, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nres.Network.IPAM.Config) == 0 || !nres.Network.IPAM.Config[0].Gateway.IsValid() {
		t.Fatalf("network %s has no gateway: %+v", network, nres.Network.IPAM)
	}
	gateway := nres.Network.IPAM.Config[0].Gateway.String()

	// The agent reaches neither the controller's port nor the other loopback service: not at
	// 127.0.0.1 (the container's own loopback), not through the network's gateway (the host's
	// side of the bridge, where a service bound to 127.0.0.1 does not listen).
	for _, target := range []struct {
		what string
		port int
	}{{"the controller's port", controllerPort(t, c)}, {"a service on the host's 127.0.0.1", port}} {
		for _, host := range []string{"127.0.0.1", gateway} {
			out := c.reach(t, ws.ID, host, target.port)
			if strings.Contains(out, banner) || strings.Contains(out, "HTTP/1.") || strings.Contains(out, "exit=0") {
				t.Errorf("the agent reached %s at %s:%d:\n%s", target.what, host, target.port, out)
			}
		}
	}
	// Nor the controller's socket: /run/tether is the runner's alone.
	if r := c.cli(t, nil, "exec", ws.ID, "--", "sh", "-c", "ls /run/tether/controller || cat /run/tether/controller/runner.sock"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "Permission denied") {
		t.Errorf("the agent got at the controller socket's directory: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if out := c.mustCLI(t, "exec", ws.ID, "--", "stat", "-c", "%u:%g %a", "/workspace"); out != "65532:65532 755\n" {
		t.Errorf("/workspace is %q, want the agent's, 755", out)
	}

	c.mustCLI(t, "workspace", "rm", ws.ID)
	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 0 {
		t.Fatalf("networks left after workspace rm: %v", nets)
	}
	if names := containersOf(t, cli, ws.AllocationID); len(names) != 0 {
		t.Fatalf("containers left after workspace rm: %v", names)
	}
}

// A runner on its private network keeps its connection through the socket when the controller
// restarts: the socket's directory (mounted into the container) outlives the controller process.
func TestDockerRunnerSocketSurvivesControllerRestart(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")
	c.Stop()
	c2 := startController(t, serveOpts{data: c.Data})
	eventually(t, 30*time.Second, "the runner back through the socket", func() bool {
		return c2.showWorkspace(t, ws.ID).Connected
	})
	if out := c2.mustCLI(t, "exec", ws.ID, "--", "echo", "back"); out != "back\n" {
		t.Fatalf("exec after the restart: %q", out)
	}
	c2.mustCLI(t, "workspace", "rm", ws.ID)
	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 0 {
		t.Fatalf("networks left after workspace rm: %v", nets)
	}
}

// network=host stays possible when asked: recorded and shown, the runner dials the controller's
// URL, and the host's loopback is in reach (which is what the default takes away).
func TestDockerHostNetworkWhenAsked(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	port, banner := hostLoopbackService(t)
	ws := c.createOn(t, "docker", "--provider-opt", "network=host")
	info := c.showWorkspace(t, ws.ID).AllocationInfo
	if info["network"] != "host" || info["docker_network"] != "" || info["runner_connects"] != c.Addr {
		t.Errorf("allocation info %v; want network host, the runner on %s", info, c.Addr)
	}
	if show := c.mustCLI(t, "workspace", "show", ws.ID); !strings.Contains(show, "network:") || !strings.Contains(show, "host") {
		t.Errorf("workspace show:\n%s", show)
	}
	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 0 {
		t.Errorf("network=host made networks: %v", nets)
	}
	if out := c.reach(t, ws.ID, "127.0.0.1", port); !strings.Contains(out, banner) {
		t.Errorf("with network=host the agent does not reach the host's loopback:\n%s", out)
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
}

// A service in a Docker workspace on its private network: its endpoint's direct address is the
// container's on that network (reachable from the host, as every bridge network is), and the
// controller's proxy reaches it too. The service listens on all its interfaces, as a
// service in a container must to be reached from outside it.
func TestDockerServiceOnPrivateNetwork(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")
	server := filepath.Join(t.TempDir(), "server")
	buildServiceServerTo(t, server)
	c.mustCLI(t, "files", "put", ws.ID, server, "server", "--mode", "0755")

	r := c.cli(t, nil, "service", "start", ws.ID, "web", "--port", "auto", "--ready", "http:/health",
		"--env", "LISTEN_HOST=0.0.0.0", "--json", "--", "./server")
	if r.Code != 0 {
		t.Fatalf("service start: %+v", r)
	}
	var svc api.Service
	if err := json.Unmarshal([]byte(r.Stdout), &svc); err != nil || svc.State != "ready" || svc.Port == 0 {
		t.Fatalf("service start printed %q: %v", r.Stdout, err)
	}
	var ep api.ServiceEndpoint
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "endpoint", ws.ID, "web", "--json")), &ep); err != nil {
		t.Fatal(err)
	}
	res, err := cli.ContainerInspect(context.Background(), "tether-"+ws.AllocationID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := res.Container.NetworkSettings.Networks["tether-"+ws.AllocationID].IPAddress.String()
	if want := "http://" + net.JoinHostPort(addr, strconv.Itoa(svc.Port)); ep.DirectURL != want {
		t.Fatalf("endpoint %+v; want the direct address %s", ep, want)
	}
	resp, err := http.Get(ep.DirectURL + "/from-the-test")
	if err != nil {
		t.Fatalf("GET the direct address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the direct address: %s", resp.Status)
	}
	// And through the controller's proxy, with the operator token.
	req, _ := http.NewRequest(http.MethodGet, ep.URL+"through-the-proxy", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through the proxy: %s", resp.Status)
	}
	eventually(t, 10*time.Second, "the proxied request in the service log", func() bool {
		return strings.Contains(c.mustCLI(t, "service", "logs", ws.ID, "web"), "request /through-the-proxy")
	})
	eventually(t, 10*time.Second, "the request in the service log", func() bool {
		return strings.Contains(c.mustCLI(t, "service", "logs", ws.ID, "web"), "request /from-the-test")
	})
	c.mustCLI(t, "service", "stop", ws.ID, "web")
	if r := c.cli(t, nil, "service", "endpoint", ws.ID, "web"); r.Code == 0 {
		t.Fatalf("endpoint of a stopped service: %+v", r)
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
}

// buildServiceServerTo builds serviceServer (see service_test.go) into the file out.
func buildServiceServerTo(t *testing.T, out string) {
	t.Helper()
	ws := api.Workspace{Root: t.TempDir()}
	buildServiceServer(t, ws)
	if err := os.Rename(filepath.Join(ws.Root, "server"), out); err != nil {
		t.Fatal(err)
	}
}

// network=internal: the workspace's own network marked Internal (nothing leaves it where
// dockerd manages iptables); the runner still connects through the socket, the host's loopback
// is still out of reach, and the network goes with the workspace.
func TestDockerInternalNetwork(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	port, banner := hostLoopbackService(t)
	ws := c.createOn(t, "docker", "--provider-opt", "network=internal")
	if info := c.showWorkspace(t, ws.ID).AllocationInfo; info["network"] != "internal" || info["docker_network"] != "tether-"+ws.AllocationID {
		t.Errorf("allocation info %v", info)
	}
	nres, err := cli.NetworkInspect(context.Background(), "tether-"+ws.AllocationID, client.NetworkInspectOptions{})
	if err != nil || !nres.Network.Internal {
		t.Fatalf("network: internal %v, %v", nres.Network.Internal, err)
	}
	if out := c.reach(t, ws.ID, "127.0.0.1", port); strings.Contains(out, banner) || strings.Contains(out, "exit=0") {
		t.Errorf("the agent reached the host's loopback:\n%s", out)
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
	if nets := networksOf(t, cli, ws.AllocationID); len(nets) != 0 {
		t.Fatalf("networks left after workspace rm: %v", nets)
	}
}
