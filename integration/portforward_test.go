package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/integration/devserver/pattern"
	"github.com/tetherhq/tether/protocol"
)

// pfDownload is the size of the large downloads: big enough that nothing on the way can hold it
// all without showing in its memory.
const pfDownload = 256 << 20

var (
	pfDevserverOnce sync.Once
	pfDevserverPath string
	pfDevserverErr  error
)

// pfDevserver builds integration/devserver (static) once per test binary.
func pfDevserver(t *testing.T) string {
	t.Helper()
	pfDevserverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pf-devserver-")
		if err != nil {
			pfDevserverErr = err
			return
		}
		pfDevserverPath = filepath.Join(dir, "devserver")
		cmd := exec.Command("go", "build", "-o", pfDevserverPath, "./devserver")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			pfDevserverErr = fmt.Errorf("build devserver: %v\n%s", err, out)
		}
	})
	if pfDevserverErr != nil {
		t.Fatal(pfDevserverErr)
	}
	return pfDevserverPath
}

// startDevserver puts the devserver into the workspace and starts it as service name on an
// allotted port, bound to the sandbox's 127.0.0.1.
func (c *controllerProc) startDevserver(t *testing.T, ws api.Workspace, name string) api.Service {
	t.Helper()
	c.mustCLI(t, "files", "put", ws.ID, pfDevserver(t), "devserver", "--mode", "0755")
	out := c.mustCLI(t, "service", "start", ws.ID, name, "--port", "auto", "--ready", "http:/health", "--json", "--", "./devserver")
	var svc api.Service
	if err := json.Unmarshal([]byte(out), &svc); err != nil || svc.State != protocol.ServiceReady || svc.Port == 0 {
		t.Fatalf("service start printed %q: %v", out, err)
	}
	return svc
}

// pfProc is a running `tether port-forward`.
type pfProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	// local maps each remote port to the local address forwarding to it.
	local  map[int]string
	exited chan struct{}
	err    error
}

var forwardingLine = regexp.MustCompile(`(?m)^Forwarding from (\S+) -> (\d+)$`)

// portForward starts `tether port-forward ws mappings...` and waits for its forwarding lines.
func (c *controllerProc) portForward(t *testing.T, ws string, mappings ...string) *pfProc {
	t.Helper()
	p := &pfProc{cmd: c.cliCmd(append([]string{"port-forward", ws}, mappings...)...),
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, local: map[int]string{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.exited
		if t.Failed() {
			t.Logf("port-forward stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
		}
	})
	eventually(t, 30*time.Second, "port-forward's forwarding lines", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("port-forward exited: %v\nstdout: %s\nstderr: %s", p.err, p.stdout.String(), p.stderr.String())
		default:
		}
		return len(forwardingLine.FindAllString(p.stdout.String(), -1)) == len(mappings)
	})
	for _, m := range forwardingLine.FindAllStringSubmatch(p.stdout.String(), -1) {
		remote, _ := strconv.Atoi(m[2])
		p.local[remote] = m[1]
	}
	return p
}

// url is http://LOCAL for the forward of remote.
func (p *pfProc) url(t *testing.T, remote int) string {
	t.Helper()
	addr, ok := p.local[remote]
	if !ok {
		t.Fatalf("no forward of port %d: %v", remote, p.local)
	}
	return "http://" + addr
}

// curl GETs url with the curl binary when there is one (Go's client otherwise) and returns the
// body.
func curl(t *testing.T, url string) (string, error) {
	t.Helper()
	if path, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command(path, "-sS", "--fail", "--max-time", "60", url).Output()
		return string(out), err
	}
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// pfGetPattern downloads n bytes of the devserver's pattern from base and checks every byte
// while it streams (nothing is held whole).
func pfGetPattern(t *testing.T, base string, n int64) {
	t.Helper()
	resp, err := http.Get(base + "/bytes?n=" + strconv.FormatInt(n, 10))
	if err != nil {
		t.Fatalf("GET /bytes: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /bytes: %s", resp.Status)
	}
	if err := checkPattern(resp.Body, 0, n); err != nil {
		t.Fatalf("download of %d bytes: %v", n, err)
	}
}

// checkPattern reads r to its end and checks it is the devserver's pattern from offset from,
// to offset to.
func checkPattern(r io.Reader, from, to int64) error {
	buf := make([]byte, 256<<10)
	off := from
	for {
		k, err := r.Read(buf)
		for j := range k {
			i := off + int64(j)
			if buf[j] != pattern.Byte(i) {
				return fmt.Errorf("byte %d is %d, want %d", i, buf[j], pattern.Byte(i))
			}
		}
		off += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", off, err)
		}
	}
	if off != to {
		return fmt.Errorf("got %d bytes, want %d", off-from, to-from)
	}
	return nil
}

// wsEcho opens a websocket to the devserver's echo at base (http://…) and checks one echo.
func wsEcho(t *testing.T, base, msg string) *websocket.Conn {
	t.Helper()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws/echo", nil)
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("websocket write: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, got, err := conn.ReadMessage()
	if err != nil || string(got) != "echo: "+msg {
		t.Fatalf("websocket echo %q, %v", got, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn
}

// halfClosedRequest sends an HTTP/1.0 request on a raw connection to addr, shuts its writing
// half and reads the whole answer: the FIN must travel to the sandbox and the answer back.
func halfClosedRequest(t *testing.T, addr, path string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("answer after a half-close: %v (%q)", err, b)
	}
	return string(b)
}

// A devserver bound to 127.0.0.1 inside a Docker workspace on its private network is out of
// the host's reach, and port-forward reaches it: curl, a websocket, a half-closed request, an
// upload and a 256 MiB download byte-exact; a stopped service's connections are refused while
// the listener stays up; SIGTERM ends the command with status 0.
func TestPortForwardDocker(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")
	svc := c.startDevserver(t, ws, "web")

	unreachableFromHost(t, cli, ws, svc.Port)

	pf := c.portForward(t, ws.ID, "0:"+strconv.Itoa(svc.Port))
	base := pf.url(t, svc.Port)
	if body, err := curl(t, base+"/health"); err != nil || body != "ok\n" {
		t.Fatalf("curl /health through port-forward: %q, %v", body, err)
	}
	if !strings.Contains(pf.stderr.String(), "Handling connection for "+strconv.Itoa(svc.Port)) {
		t.Fatalf("no 'Handling connection' line on stderr: %q", pf.stderr.String())
	}
	conn := wsEcho(t, base, "through the runner")
	conn.Close()
	if ans := halfClosedRequest(t, strings.TrimPrefix(base, "http://"), "/health"); !strings.HasPrefix(ans, "HTTP/1.0 200") || !strings.HasSuffix(ans, "ok\n") {
		t.Fatalf("half-closed request answered %q", ans)
	}
	upload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB up
	resp, err := http.Post(base+"/upload", "application/octet-stream", bytes.NewReader(upload))
	if err != nil {
		t.Fatal(err)
	}
	var up struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	}
	err = json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	sum := sha256.Sum256(upload)
	if err != nil || up.Bytes != int64(len(upload)) || up.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload answered %+v, %v", up, err)
	}
	pfGetPattern(t, base, pfDownload)

	// The Go client's service form reaches the same server by name.
	sc, err := c.Client(t).DialService(context.Background(), ws.ID, "web")
	if err != nil {
		t.Fatalf("DialService: %v", err)
	}
	fmt.Fprintf(sc, "GET /health HTTP/1.0\r\n\r\n")
	b, err := io.ReadAll(sc)
	sc.Close()
	if err != nil || !strings.HasSuffix(string(b), "ok\n") {
		t.Fatalf("DialService answer %q, %v", b, err)
	}

	c.mustCLI(t, "service", "stop", ws.ID, "web")
	if _, err := curl(t, base+"/health"); err == nil {
		t.Fatal("a stopped service answered through port-forward")
	}
	eventually(t, 10*time.Second, "the refusal on port-forward's stderr", func() bool {
		return strings.Contains(pf.stderr.String(), "error: forwarding to port "+strconv.Itoa(svc.Port)+": unavailable: ")
	})
	select {
	case <-pf.exited:
		t.Fatalf("port-forward exited after a refused connection: %v", pf.err)
	default:
	}
	_ = pf.cmd.Process.Signal(syscall.SIGTERM)
	<-pf.exited
	if pf.err != nil {
		t.Fatalf("port-forward after SIGTERM: %v (stderr %q)", pf.err, pf.stderr.String())
	}
	if conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://")); err == nil {
		conn.Close()
		t.Fatal("port-forward's listener still accepts after SIGTERM")
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
}

// The runner's socket is cut during a port-forward: the connection open through it may fail,
// and the next one succeeds once the runner is back (the command waits for it), on the same
// listener.
func TestPortForwardSurvivesRunnerReconnect(t *testing.T) {
	p := startProxy(t)
	c := startController(t, serveOpts{extraArgs: []string{"--advertise-url", p.URL()}})
	p.setTarget(c.Addr)
	ws := c.createWorkspace(t, "--name", "pf-cut")
	svc := c.startDevserver(t, ws, "web")
	// A local sandbox shares the host's loopback: the service is reachable directly too.
	if body, err := curl(t, fmt.Sprintf("http://127.0.0.1:%d/health", svc.Port)); err != nil || body != "ok\n" {
		t.Fatalf("the local service directly: %q, %v", body, err)
	}
	pf := c.portForward(t, ws.ID, ":"+strconv.Itoa(svc.Port))
	base := pf.url(t, svc.Port)
	open := wsEcho(t, base, "before the cut")
	defer open.Close()

	p.cut()
	// The open connection was carried by the cut socket: it ends (or, at the latest, the
	// controller cuts it when it sees the runner gone).
	_ = open.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, _, err := open.ReadMessage(); err == nil {
		t.Fatal("the connection open through the cut socket still delivered a message")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection open through the cut socket neither ended nor answered")
	}
	// The next connection goes through the same listener: the command waits for the runner.
	if body, err := curl(t, base+"/health"); err != nil || body != "ok\n" {
		t.Fatalf("curl after the cut: %q, %v", body, err)
	}
	wsEcho(t, base, "after the cut").Close()
	if n := strings.Count(pf.stderr.String(), "Handling connection for "+strconv.Itoa(svc.Port)); n < 3 {
		t.Fatalf("%d connections handled, want 3 or more: %q", n, pf.stderr.String())
	}
}

// What may be reached is the controller's call: a port no service of the workspace has is
// invalid_argument, unless the operator forwards it (--forward-ports); the controller's own
// port never is; nothing listening, or a stopped service, is unavailable. Bad mappings are
// refused before anything listens.
func TestPortForwardRefusals(t *testing.T) {
	// A plain listener on the host's loopback, which a local sandbox shares.
	plain, banner := hostLoopbackService(t)
	// The controller's own port, chosen beforehand so it can be named in --forward-ports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	own := l.Addr().(*net.TCPAddr).Port
	l.Close()
	closedPort := freePort(t)
	c := startController(t, serveOpts{listen: fmt.Sprintf("127.0.0.1:%d", own),
		extraArgs: []string{"--forward-ports", fmt.Sprintf("%d,%d,%d", plain, own, closedPort)}})
	ws := c.createWorkspace(t, "--name", "pf-refusals")
	svc := c.startDevserver(t, ws, "web")
	cl := c.Client(t)
	ctx := context.Background()

	for _, bad := range []string{"abc", "0", "70000", "1:2:3"} {
		r := c.cli(t, nil, "port-forward", ws.ID, bad)
		if r.Code != 2 || !strings.HasPrefix(r.Stderr, "error: invalid_argument: ") || r.Stdout != "" {
			t.Fatalf("port-forward %s: %+v", bad, r)
		}
	}
	if r := c.cli(t, nil, "port-forward", "ws_nosuchworkspace", "8080"); r.Code == 0 || !strings.Contains(r.Stderr, "not_found") || r.Stdout != "" {
		t.Fatalf("port-forward to a missing workspace: %+v", r)
	}

	notOurs := freePort(t)
	if _, err := cl.DialPort(ctx, ws.ID, notOurs); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a port no service has: %v, want invalid_argument", err)
	}
	if _, err := cl.DialPort(ctx, ws.ID, own); protocol.CodeOf(err) != protocol.CodeInvalidArgument || !strings.Contains(err.Error(), "controller's own") {
		t.Fatalf("the controller's own port: %v, want invalid_argument", err)
	}
	if _, err := cl.DialPort(ctx, ws.ID, closedPort); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("a forwarded port nothing listens on: %v, want unavailable", err)
	}
	if _, err := cl.DialService(ctx, ws.ID, "nosuch"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("a service that does not exist: %v, want not_found", err)
	}

	// Through the command: the refused mapping says why on stderr, the others work.
	pf := c.portForward(t, ws.ID, "0:"+strconv.Itoa(notOurs), "0:"+strconv.Itoa(plain), "0:"+strconv.Itoa(svc.Port))
	conn, err := net.Dial("tcp", pf.local[notOurs])
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if b, err := io.ReadAll(conn); err != nil || len(b) != 0 {
		t.Fatalf("a refused connection read %q, %v; want it closed", b, err)
	}
	conn.Close()
	eventually(t, 10*time.Second, "the refusal on stderr", func() bool {
		return strings.Contains(pf.stderr.String(), fmt.Sprintf("error: forwarding to port %d: invalid_argument: port %d is not workspace", notOurs, notOurs))
	})
	conn, err = net.Dial("tcp", pf.local[plain])
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || line != banner+"\n" {
		t.Fatalf("the operator's forwarded port answered %q, %v", line, err)
	}
	if body, err := curl(t, pf.url(t, svc.Port)+"/health"); err != nil || body != "ok\n" {
		t.Fatalf("the service after a refusal: %q, %v", body, err)
	}

	c.mustCLI(t, "service", "stop", ws.ID, "web")
	if _, err := cl.DialPort(ctx, ws.ID, svc.Port); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("a stopped service's port: %v, want unavailable", err)
	}
	if _, err := cl.DialService(ctx, ws.ID, "web"); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("a stopped service by name: %v, want unavailable", err)
	}
}

// freePort is a port of 127.0.0.1 nothing listens on (at the time of the call).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// --forward-max-conns bounds a workspace's open connections: the third of two is refused
// (unavailable) and, once one closed, a new one is admitted.
func TestPortForwardConnectionLimit(t *testing.T) {
	c := startController(t, serveOpts{extraArgs: []string{"--forward-max-conns", "2"}})
	ws := c.createWorkspace(t, "--name", "pf-limit")
	svc := c.startDevserver(t, ws, "web")
	pf := c.portForward(t, ws.ID, "0:"+strconv.Itoa(svc.Port))
	base := pf.url(t, svc.Port)
	first := wsEcho(t, base, "one")
	defer first.Close()
	second := wsEcho(t, base, "two")
	defer second.Close()

	if _, err := c.Client(t).DialPort(context.Background(), ws.ID, svc.Port); protocol.CodeOf(err) != protocol.CodeUnavailable || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a third connection: %v, want unavailable (the limit)", err)
	}
	if _, err := curl(t, base+"/health"); err == nil {
		t.Fatal("a third connection through port-forward was admitted")
	}
	eventually(t, 10*time.Second, "the limit's refusal on stderr", func() bool {
		return strings.Contains(pf.stderr.String(), "unavailable: workspace "+ws.ID+" has 2 connections open")
	})
	first.Close()
	// The slot comes back once the closed connection ended through the runner.
	eventually(t, 30*time.Second, "a connection admitted after one closed", func() bool {
		conn, err := c.Client(t).DialPort(context.Background(), ws.ID, svc.Port)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	wsEcho(t, base, "three").Close()
}

// A client that stops reading a 256 MiB download does not make the controller (or the runner)
// hold it: the sandbox's server ends up blocked on a full socket while their memory stays
// bounded, and the download then completes byte-exact.
func TestPortForwardSlowClientIsBackpressured(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "pf-slow")
	svc := c.startDevserver(t, ws, "web")
	pf := c.portForward(t, ws.ID, "0:"+strconv.Itoa(svc.Port))
	conn, err := net.Dial("tcp", pf.local[svc.Port])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive buffer of our own, so what piles up is upstream of this socket.
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	fmt.Fprintf(conn, "GET /bytes?n=%d HTTP/1.0\r\nHost: x\r\n\r\n", pfDownload)
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(bytes.NewReader(head), 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	// Stalled. Were the controller or the runner reading everything into memory, the devserver
	// would write the whole download at once and its socket's queue would drain; stalled end to
	// end, its queue fills and stays full.
	eventually(t, 60*time.Second, "the devserver's socket to back up", func() bool {
		return sendQueue(t, svc.Port) >= 256<<10
	})
	for name, pid := range map[string]int{"controller": c.cmd.Process.Pid, "runner": c.runnerPID(t, ws)} {
		if hwm := vmHWM(t, pid); hwm > 200<<20 {
			t.Fatalf("the %s's peak memory is %d MiB during a stalled 256 MiB download: it buffers the stream", name, hwm>>20)
		} else {
			t.Logf("%s peak memory during the stall: %d MiB", name, hwm>>20)
		}
	}
	if err := checkPattern(io.MultiReader(bytes.NewReader(head), resp.Body), 0, pfDownload); err != nil {
		t.Fatalf("the download after the stall: %v", err)
	}
	// The peak covers the whole stall, however long the pile-up would have taken.
	if hwm := vmHWM(t, c.cmd.Process.Pid); hwm > 200<<20 {
		t.Fatalf("the controller's peak memory is %d MiB after a stalled 256 MiB download: it buffered the stream", hwm>>20)
	}
}

// sendQueue is the most bytes queued to send on an established TCP socket of 127.0.0.1 whose
// local port is port (the devserver's side of its connections), from /proc/net/tcp.
func sendQueue(t *testing.T, port int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(":%04X", port)
	var most int64
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], want) || f[3] != "01" {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		if n, err := strconv.ParseInt(tx, 16, 64); err == nil && n > most {
			most = n
		}
	}
	return most
}

// unreachableFromHost fails the test if the service on port of a Docker workspace answers at the
// container's address: the tests need it bound to the sandbox's loopback, reachable only through
// the runner.
func unreachableFromHost(t *testing.T, cli *client.Client, ws api.Workspace, port int) {
	t.Helper()
	res, err := cli.ContainerInspect(context.Background(), "tether-"+ws.AllocationID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := res.Container.NetworkSettings.Networks["tether-"+ws.AllocationID].IPAddress.String()
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), 5*time.Second); err == nil {
		conn.Close()
		t.Fatalf("the service on port %d answered at the container's address %s from the host; it must be bound to the sandbox's loopback", port, ip)
	}
}
