package clusterharness

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Balancer modes: "http" balances every request on its own (a client's keep-alive connection
// does not pin it to one controller, as behind most production balancers), "tcp" balances
// connections.
const (
	ModeHTTP = "http"
	ModeTCP  = "tcp"
)

// A Backend is one controller behind the balancer.
type Backend struct {
	Name string // the server's name in HAProxy
	Addr string // host:port it listens on
}

// Balancer is a real HAProxy in front of the controllers, round robin, checking each with
// GET /healthz. It listens on 127.0.0.1 (the test's clients) and on the bridge's address (the
// runners, inside the nodes) on one port.
type Balancer struct {
	Port      int
	LocalURL  string // http://127.0.0.1:PORT
	BridgeURL string // http://BRIDGE:PORT — what controllers advertise to runners
	sock      string // the admin socket
	log       string
	exited    chan struct{}
}

// haproxyConfig is the balancer's configuration. The check interval is short so a test sees a
// controller that died or came back within a second, not the production 2s×3.
var haproxyConfig = template.Must(template.New("haproxy").Parse(`global
	maxconn 4096
	stats socket {{.Sock}} mode 600 level admin
	log stdout format raw local0 info

defaults
	mode {{.Mode}}
	log global
	option {{.Mode}}log
	balance roundrobin
	# A connection refused by a dead controller is retried on another.
	retries 2
	option redispatch
	timeout connect 5s
	timeout check 2s
	# Exec streams and lease waits sit idle for a while; runner websockets, once upgraded,
	# live under the tunnel timeout (the runner pings well within it).
	timeout client 10m
	timeout server 10m
	timeout tunnel 1h

frontend tether
	bind 127.0.0.1:{{.Port}}
	bind {{.Bridge}}:{{.Port}}
	default_backend controllers

backend controllers
	option httpchk GET /healthz
	http-check expect status 200
	default-server check inter 250ms fall 2 rise 1
{{- range .Backends}}
	server {{.Name}} {{.Addr}}
{{- end}}
`))

// StartBalancer starts HAProxy (haproxy -db: in the foreground, killed with t) in front of
// backends. The servers need not be up yet: WaitState tells when HAProxy sees them.
func StartBalancer(t testing.TB, n *Network, mode string, backends []Backend) *Balancer {
	t.Helper()
	bin := haproxyBinary()
	if bin == "" {
		need(t, "haproxy (Debian package haproxy; run `.ci/deps haproxy`)")
	}
	dir := t.TempDir()
	var last error
	for range 3 { // a free port can be taken between probing and binding: the next try probes anew
		b, err := startHAProxy(t, bin, dir, n, mode, backends)
		if err == nil {
			return b
		}
		last = err
	}
	t.Fatalf("HAProxy: %v", last)
	return nil
}

func haproxyBinary() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/haproxy"); err == nil && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/haproxy" // Debian's, off a non-root PATH
	}
	return ""
}

func startHAProxy(t testing.TB, bin, dir string, n *Network, mode string, backends []Backend) (*Balancer, error) {
	port, err := freePort(n)
	if err != nil {
		return nil, err
	}
	b := &Balancer{
		Port:      port,
		LocalURL:  fmt.Sprintf("http://127.0.0.1:%d", port),
		BridgeURL: fmt.Sprintf("http://%s:%d", n.HostIP, port),
		sock:      filepath.Join(dir, "admin.sock"),
		log:       filepath.Join(dir, "haproxy.log"),
		exited:    make(chan struct{}),
	}
	_ = os.Remove(b.sock)
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	f, err := os.Create(cfgPath)
	if err != nil {
		return nil, err
	}
	err = haproxyConfig.Execute(f, map[string]any{"Sock": b.sock, "Mode": mode, "Port": port, "Bridge": n.HostIP, "Backends": backends})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-c", "-q", "-f", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c: %v\n%s", err, out)
	}
	logf, err := os.OpenFile(b.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-db", "-f", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the test process even when t's cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(b.exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-b.exited
	}
	// Ready once its admin socket answers: it binds the frontends before it opens the socket.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := b.command("show info"); err == nil {
			break
		}
		select {
		case <-b.exited:
			log, _ := os.ReadFile(b.log)
			return nil, fmt.Errorf("haproxy exited at start; log:\n%s", log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("haproxy's admin socket did not answer within 30s")
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("haproxy log (tail):\n%s", Tail(b.log, 16<<10))
		}
		stop()
	})
	return b, nil
}

// freePort is a port free on both 127.0.0.1 and the bridge's address.
func freePort(n *Network) (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("%s:%d", n.HostIP, port))
		l.Close()
		if err == nil {
			l2.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on both 127.0.0.1 and %s", n.HostIP)
}

// command sends one command to HAProxy's admin socket and returns the answer.
func (b *Balancer) command(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", b.sock, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	var sb strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		sb.WriteString(sc.Text() + "\n")
	}
	return sb.String(), sc.Err()
}

// States is each backend server's state as HAProxy's checks see it: "UP", "DOWN", "MAINT",
// or a transition such as "UP 1/2".
func (b *Balancer) States(t testing.TB) map[string]string {
	t.Helper()
	out, err := b.command("show stat")
	if err != nil {
		t.Fatalf("haproxy show stat: %v", err)
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# "))).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("haproxy show stat: %v\n%s", err, out)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	states := map[string]string{}
	for _, r := range rows[1:] {
		if r[col["pxname"]] == "controllers" && r[col["svname"]] != "BACKEND" {
			states[r[col["svname"]]] = r[col["status"]]
		}
	}
	return states
}

// WaitState waits until HAProxy's checks put server in state ("UP" or "DOWN").
func (b *Balancer) WaitState(t testing.TB, server, state string) {
	t.Helper()
	var last string
	Eventually(t, 30*time.Second, fmt.Sprintf("haproxy to see %s %s", server, state), func() bool {
		last = b.States(t)[server]
		return last == state
	}, func() string { return "last state " + last })
}

// SetMaint puts a server in (on) or out of maintenance: HAProxy sends it nothing new, as an
// operator draining a controller would.
func (b *Balancer) SetMaint(t testing.TB, server string, on bool) {
	t.Helper()
	state := "ready"
	if on {
		state = "maint"
	}
	if out, err := b.command(fmt.Sprintf("set server controllers/%s state %s", server, state)); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("haproxy set server %s state %s: %v %s", server, state, err, out)
	}
}
