package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// tokenTap relays runner connections to the controller, like proxy, and reads every session token
// the controller sends over them: the connection is plain websocket, so the welcome's token is
// there in the clear. It holds what an attacker who read the runner's traffic (or its memory)
// would hold.
type tokenTap struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	tokens []string
}

var sessionTokenRE = regexp.MustCompile(`tss_[0-9a-f]{64}`)

func startTokenTap(t *testing.T) *tokenTap {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tokenTap{l: l}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { p.sniff(c, up); c.Close() }()
		}
	}()
	return p
}

// sniff copies the controller's side to the runner, keeping every session token that passes.
func (p *tokenTap) sniff(dst io.Writer, src io.Reader) {
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous read, for a token cut across two reads
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			p.mu.Lock()
			for _, m := range sessionTokenRE.FindAll(seen, -1) {
				if tok := string(m); len(p.tokens) == 0 || p.tokens[len(p.tokens)-1] != tok {
					p.tokens = append(p.tokens, tok)
				}
			}
			p.mu.Unlock()
			tail = append([]byte(nil), seen[max(0, len(seen)-80):]...)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tokenTap) URL() string { return "http://" + p.l.Addr().String() }

func (p *tokenTap) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = strings.TrimPrefix(addr, "http://")
}

// cut closes every relayed connection: both ends see their socket die.
func (p *tokenTap) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// latest waits until the tap has seen more than n tokens and returns them all.
func (p *tokenTap) latest(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	eventually(t, 30*time.Second, "a session token on the wire", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		out = append([]string(nil), p.tokens...)
		return len(out) > n
	})
	return out
}

// dialRunner opens the runner websocket with token, as a second "runner" would, and returns the
// refusal (it fails the test if the connection is accepted).
func dialRunner(t *testing.T, addr, token string) (int, protocol.Error) {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", protocol.Bearer(token))
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(addr, "http")+protocol.ConnectPath, h)
	if err == nil {
		ws.Close()
		t.Fatal("a runner connection with a stolen token was accepted")
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	defer resp.Body.Close()
	var body api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error
}

func (c *controllerProc) events(t *testing.T, id string) []api.Event {
	t.Helper()
	var evs []api.Event
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "events", id, "--json")), &evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

func refusedConnections(evs []api.Event) int {
	n := 0
	for _, e := range evs {
		if strings.HasPrefix(e.Cause, "runner connection from ") && strings.Contains(e.Cause, "refused") {
			n++
		}
	}
	return n
}

// startRunner starts a real tether-runner for the allocation with token, the way an attacker
// inside the sandbox would start their own.
func startRunner(t *testing.T, addr, allocationID, token string) (*exec.Cmd, *bytes.Buffer, chan error) {
	t.Helper()
	cmd := exec.Command(bin("tether-runner"))
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"TETHER_CONTROLLER_URL=" + addr, "TETHER_RUNNER_TOKEN=" + token,
		"TETHER_ALLOCATION_ID=" + allocationID, "TETHER_WORKSPACE_ROOT=" + cmd.Dir, "PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		done <- cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, &stderr, done
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// The session token cannot simply be replayed. A second runner holding the current token — read
// off the wire here — is refused while the real runner is connected (which goes on serving), and
// the attempt is a workspace event; the genuine runner's reconnect after its socket drops gets it
// a new token, and the old one is refused from then on.
func TestSessionTokenReplayRefused(t *testing.T) {
	tap := startTokenTap(t)
	c := startController(t, serveOpts{extraArgs: []string{"--advertise-url", tap.URL()}})
	tap.setTarget(c.Addr)
	ws := c.createWorkspace(t)
	stolen := tap.latest(t, 0)
	current := stolen[len(stolen)-1]

	// A second connection with the current token, straight to the controller: refused.
	status, e := dialRunner(t, c.Addr, current)
	if status != protocol.StatusAllocationBusy || e.Code != protocol.CodeUnauthorized || !strings.Contains(e.Message, ws.AllocationID) {
		t.Fatalf("second connection with the current token: %d %+v; want %d unauthorized", status, e, protocol.StatusAllocationBusy)
	}
	// A whole second runner with it: refused again and again (it retries, as the genuine runner
	// would), never swapped in for the real one.
	fake, fakeErr, fakeDone := startRunner(t, c.Addr, ws.AllocationID, current)
	eventually(t, 30*time.Second, "the second runner's attempts to be recorded", func() bool {
		return refusedConnections(c.events(t, ws.ID)) >= 3
	})
	select {
	case err := <-fakeDone:
		t.Fatalf("a runner refused as a second connection exited instead of retrying: %v\n%s", err, fakeErr)
	default:
	}
	if r := c.cli(t, nil, "exec", ws.ID, "--", "echo", "still"); r.Code != 0 || r.Stdout != "still\n" {
		t.Fatalf("exec through the real runner while a second one knocks: %+v", r)
	}
	if got := c.showWorkspace(t, ws.ID); !got.Connected || got.State != api.StateReady {
		t.Fatalf("workspace after the refused connections: %+v", got)
	}
	for _, ev := range c.events(t, ws.ID) {
		if strings.HasPrefix(ev.Cause, "runner connection from ") && (ev.From != api.StateReady || ev.To != api.StateReady) {
			t.Fatalf("a refused connection changed the workspace's state: %+v", ev)
		}
	}
	// (One holding the current token could win the race to reconnect after a drop, as the
	// genuine runner holds no more than it does: that is why the token must not leak. Stop it.)
	_ = fake.Process.Kill()
	<-fakeDone

	// The genuine runner's socket drops: it reconnects with its token and gets a new one.
	tap.cut()
	eventually(t, 30*time.Second, "the runner to reconnect", func() bool { return c.showWorkspace(t, ws.ID).Connected })
	fresh := tap.latest(t, len(stolen))
	if next := fresh[len(fresh)-1]; next == current {
		t.Fatal("the reconnect's welcome carried the same token")
	}
	if r := c.cli(t, nil, "exec", ws.ID, "--", "echo", "after"); r.Code != 0 || r.Stdout != "after\n" {
		t.Fatalf("exec after the reconnect: %+v", r)
	}
	// The token the runner had before is dead: a 401, and a runner started with it is refused
	// outright and exits.
	status, e = dialRunner(t, c.Addr, current)
	if status != http.StatusUnauthorized || e.Code != protocol.CodeUnauthorized {
		t.Fatalf("the replaced token: %d %+v; want 401 unauthorized", status, e)
	}
	_, oldErr, oldDone := startRunner(t, c.Addr, ws.AllocationID, current)
	select {
	case err := <-oldDone:
		if err == nil || !strings.Contains(oldErr.String(), "refused") {
			t.Fatalf("the runner with the replaced token: %v\n%s", err, oldErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the runner with the replaced token kept running")
	}
	if r := c.cli(t, nil, "exec", ws.ID, "--", "echo", "last"); r.Code != 0 || r.Stdout != "last\n" {
		t.Fatalf("exec at the end: %+v", r)
	}
}
