package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// serviceServer is a tiny HTTP server: it listens on 127.0.0.1:$PORT (or $LISTEN_HOST:$PORT),
// logs each request's path to stdout and answers /health with 200.
const serviceServer = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("request", r.URL.Path)
		fmt.Fprintln(w, "hello from", r.URL.Path)
	})
	host := os.Getenv("LISTEN_HOST")
	if host == "" {
		host = "127.0.0.1"
	}
	fmt.Fprintln(os.Stderr, "listening on", os.Getenv("PORT"))
	if err := http.ListenAndServe(host+":"+os.Getenv("PORT"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// buildServiceServer builds serviceServer and copies it into the workspace root as ./server.
func buildServiceServer(t *testing.T, ws api.Workspace) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(serviceServer), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module server\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", "server", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test server: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "server"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Root, "server"), b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestServiceLifecycle(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "svc")
	buildServiceServer(t, ws)

	r := c.cli(t, nil, "service", "start", ws.ID, "web", "--port", "auto", "--ready", "http:/health", "--json", "--", "./server")
	if r.Code != 0 {
		t.Fatalf("service start: %+v", r)
	}
	var svc api.Service
	if err := json.Unmarshal([]byte(r.Stdout), &svc); err != nil {
		t.Fatalf("service start --json printed %q: %v", r.Stdout, err)
	}
	if svc.State != "ready" || svc.Port == 0 || svc.PID == 0 {
		t.Fatalf("started service: %+v", svc)
	}

	// The endpoint is the controller's proxy URL, alone on stdout; a GET through it with the
	// operator token reaches the service (the endpoint itself sent it nothing).
	proxyURL := strings.TrimSpace(c.mustCLI(t, "service", "endpoint", ws.ID, "web"))
	if want := c.Addr + "/v1/workspaces/" + ws.ID + "/services/web/proxy/"; proxyURL != want {
		t.Fatalf("service endpoint printed %q; want %q", proxyURL, want)
	}
	for _, line := range strings.Split(c.mustCLI(t, "service", "logs", ws.ID, "web"), "\n") {
		if strings.HasPrefix(line, "request ") && line != "request /health" {
			t.Fatalf("service endpoint sent a request into the service: %q", line)
		}
	}
	var ep api.ServiceEndpoint
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "endpoint", ws.ID, "web", "--json")), &ep); err != nil {
		t.Fatal(err)
	}
	if ep.URL != proxyURL || ep.Port != svc.Port || ep.DirectURL == "" || !strings.Contains(ep.Headers["Authorization"], "Bearer <") ||
		strings.Contains(ep.Headers["Authorization"], c.Token) {
		t.Fatalf("endpoint --json: %+v", ep)
	}
	req, _ := http.NewRequest(http.MethodGet, proxyURL+"from-the-test", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through the proxy: %s", resp.Status)
	}

	// The log shows the request.
	eventually(t, 10*time.Second, "the request in the service log", func() bool {
		return strings.Contains(c.mustCLI(t, "service", "logs", ws.ID, "web"), "request /from-the-test")
	})
	// Resuming from an offset gives exactly the rest.
	all := c.mustCLI(t, "service", "logs", ws.ID, "web")
	if rest := c.mustCLI(t, "service", "logs", ws.ID, "web", "--since-offset", "3"); len(all) > 3 && !strings.HasPrefix(all[3:], rest[:min(len(rest), len(all)-3)]) {
		t.Fatalf("logs from offset 3 = %q; whole log %q", rest, all)
	}

	// The list and the workspace detail show it.
	var list []api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "ls", ws.ID, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "web" || list[0].State != "ready" {
		t.Fatalf("service ls: %+v", list)
	}
	if out := c.mustCLI(t, "workspace", "show", ws.ID); !strings.Contains(out, "web") {
		t.Fatalf("workspace show lacks the service:\n%s", out)
	}

	// Stop: no process left, the port refuses connections.
	var stopped api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "stop", ws.ID, "web", "--json")), &stopped); err != nil {
		t.Fatal(err)
	}
	if stopped.State != "stopped" {
		t.Fatalf("stopped service: %+v", stopped)
	}
	if alive(svc.PID) {
		t.Fatalf("pid %d is still alive after stop", svc.PID)
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(svc.Port), time.Second); err == nil {
		conn.Close()
		t.Fatalf("port %d still accepts connections after stop", svc.Port)
	}
	r = c.cli(t, nil, "service", "endpoint", ws.ID, "web")
	if r.Code == 0 || !strings.Contains(r.Stderr, "error: unavailable:") {
		t.Fatalf("endpoint of a stopped service: %+v", r)
	}
}

func TestServiceFailures(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)

	// Never ready: fails with its stderr tail.
	r := c.cli(t, nil, "service", "start", ws.ID, "sleepy", "--ready", "tcp", "--ready-timeout", "1s",
		"--", "sh", "-c", "echo never-listening-here >&2; sleep 60")
	if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: ") || !strings.Contains(r.Stderr, "never-listening-here") {
		t.Fatalf("a service that never gets ready: %+v", r)
	}

	// A crashing service with on-failure restarts a bounded number of times.
	r = c.cli(t, nil, "service", "start", ws.ID, "crash", "--ready", "tcp", "--restart", "on-failure", "--max-restarts", "2",
		"--", "sh", "-c", "exit 3")
	if r.Code == 0 {
		t.Fatalf("a crashing service started: %+v", r)
	}
	var list []api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "ls", ws.ID, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	var crash *api.Service
	for i := range list {
		if list[i].Name == "crash" {
			crash = &list[i]
		}
	}
	if crash == nil || crash.State != "failed" || crash.Restarts != 2 {
		t.Fatalf("crash service after bounded restarts: %+v (list %+v)", crash, list)
	}
}

// A log follow that loses its connection (the runner's socket is cut) resumes from the last
// offset it received: no line is lost or doubled.
func TestServiceLogFollowSurvivesADrop(t *testing.T) {
	p := startProxy(t)
	c := startController(t, serveOpts{extraArgs: []string{"--advertise-url", p.URL()}})
	p.setTarget(c.Addr)
	ws := c.createWorkspace(t, "--name", "logs")
	c.mustCLI(t, "service", "start", ws.ID, "counter", "--ready", "none", "--", "sh", "-c", "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo line $i; sleep 0.01; done; sleep 300")
	follow := c.cliCmd("service", "logs", ws.ID, "counter", "--follow")
	var out syncBuffer
	follow.Stdout = &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "some lines to arrive", func() bool { return strings.Contains(out.String(), "line 50\n") })
	p.cut()
	eventually(t, 60*time.Second, "all 400 lines after the drop", func() bool { return strings.Contains(out.String(), "line 400\n") })
	c.mustCLI(t, "service", "stop", ws.ID, "counter")
	_ = follow.Process.Signal(os.Interrupt)
	_ = follow.Wait()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines[:400] {
		if l != fmt.Sprintf("line %d", i+1) {
			t.Fatalf("line %d is %q: the follow lost or doubled output across the drop", i+1, l)
		}
	}
}

// A service with stop policy on-run-finish belongs to the run that was running when it started:
// it stops when that run ends, and a service with no running run to belong to is refused.
func TestServiceStopsWhenItsRunFinishes(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)

	r := c.cli(t, nil, "service", "start", ws.ID, "orphan", "--ready", "none", "--stop", "on-run-finish", "--", "sleep", "60")
	if r.Code == 0 || !strings.Contains(r.Stderr, "error: conflict:") {
		t.Fatalf("on-run-finish with no running run: %+v", r)
	}
	r = c.cli(t, nil, "service", "start", ws.ID, "orphan", "--ready", "none", "--run", "run_doesnotexist", "--", "sleep", "60")
	if r.Code == 0 || !strings.Contains(r.Stderr, "error: not_found:") {
		t.Fatalf("on-run-finish with an unknown run: %+v", r)
	}

	// The run: it waits until the test removes a file, so it ends when the test says.
	c.mustCLI(t, "exec", ws.ID, "--", "touch", "hold")
	runDone := make(chan result, 1)
	go func() {
		runDone <- c.cli(t, nil, "exec", ws.ID, "--", "sh", "-c", "while [ -e hold ]; do sleep 0.05; done")
	}()
	var runID string
	eventually(t, 20*time.Second, "the run to be recorded as running", func() bool {
		var runs []api.Run
		if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", ws.ID, "--json")), &runs); err != nil {
			t.Fatal(err)
		}
		for _, run := range runs {
			if run.State == api.RunRunning {
				runID = run.ID
			}
		}
		return runID != ""
	})
	var svc api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "start", ws.ID, "helper", "--ready", "none", "--stop", "on-run-finish", "--json", "--", "sleep", "60")), &svc); err != nil {
		t.Fatal(err)
	}
	if svc.State != "ready" || svc.PID == 0 {
		t.Fatalf("helper: %+v", svc)
	}
	manual := c.mustCLI(t, "service", "start", ws.ID, "keeper", "--ready", "none", "--", "sleep", "60")
	if !strings.Contains(manual, "ready") {
		t.Fatalf("keeper: %s", manual)
	}

	c.mustCLI(t, "files", "rm", ws.ID, "hold")
	if res := <-runDone; res.Code != 0 {
		t.Fatalf("the run: %+v", res)
	}
	eventually(t, 20*time.Second, "helper stopped after its run finished", func() bool {
		var list []api.Service
		if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "ls", ws.ID, "--json")), &list); err != nil {
			t.Fatal(err)
		}
		for _, v := range list {
			if v.Name == "helper" && v.State == "stopped" && strings.Contains(v.Reason, runID) {
				return true
			}
		}
		return false
	})
	if alive(svc.PID) {
		t.Fatalf("helper pid %d outlived its run", svc.PID)
	}
	var list []api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "ls", ws.ID, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.Name == "keeper" && v.State != "ready" {
			t.Fatalf("a manual service stopped with the run: %+v", v)
		}
	}
}

// Bytes a small log ring dropped before anyone read them are said on stderr; stdout holds only
// the log's own bytes, and they are the newest ones.
func TestServiceLogGapIsSaid(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	c.mustCLI(t, "service", "start", ws.ID, "chatty", "--ready", "none", "--log-bytes", "4096", "--",
		"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; sleep 60")
	eventually(t, 20*time.Second, "the whole output in the log", func() bool {
		return strings.Contains(c.mustCLI(t, "service", "logs", ws.ID, "chatty"), "line-1999\n")
	})
	r := c.cli(t, nil, "service", "logs", ws.ID, "chatty")
	if r.Code != 0 || !strings.Contains(r.Stderr, "were overwritten") || strings.Contains(r.Stdout, "line-0\n") || len(r.Stdout) != 4096 {
		t.Fatalf("logs of a wrapped ring: code %d, %d bytes, stderr %q", r.Code, len(r.Stdout), r.Stderr)
	}
}
