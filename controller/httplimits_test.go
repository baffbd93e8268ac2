package controller

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// guard bounds every wait of these tests so a broken server fails them instead of hanging; no
// assertion depends on it.
const guard = 60 * time.Second

// countingListener records, server-side, how many accepted connections are open at once.
type countingListener struct {
	net.Listener
	mu               sync.Mutex
	open, maxOpen, n int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.n++
	l.maxOpen = max(l.maxOpen, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) stats() (maxOpen, accepted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxOpen, l.n
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveLimited runs a whole controller (New + Serve) on a real 127.0.0.1 socket with limits.
// It returns the server, its listener and its base URL.
func serveLimited(t *testing.T, limits HTTPLimits) (*Server, *countingListener, string) {
	t.Helper()
	s, err := New(context.Background(), Config{DataDir: t.TempDir(), HTTP: limits,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s, l, "http://" + inner.Addr().String()
}

// keepAlive opens a raw connection, makes one keep-alive request on it and leaves it idle.
func keepAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(guard))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tether\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: %s, close %v", resp.Status, resp.Close)
	}
	return c, br
}

// closedByServer waits for the server to close c: a read that ends in EOF, not in the guard.
func closedByServer(c net.Conn, br *bufio.Reader) error {
	_, err := br.ReadByte()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return errors.New("the server sent bytes on an idle connection")
	default:
		return err
	}
}

func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	_, _, base := serveLimited(t, HTTPLimits{IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond})
	addr := base[len("http://"):]
	const idle, silent = 5, 5
	errs := make(chan error, idle+silent)
	for range idle {
		c, br := keepAlive(t, addr)
		go func() { errs <- closedByServer(c, br) }()
	}
	// Connections that never send a request are bounded by ReadHeaderTimeout.
	for range silent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(guard))
		go func() { errs <- closedByServer(c, bufio.NewReader(c)) }()
	}
	held := 0
	for range idle + silent {
		if err := <-errs; err != nil {
			t.Errorf("connection not closed by the server: %v", err)
			continue
		}
		held++
	}
	t.Logf("http-idle: %d idle keep-alive + %d silent connections tried, %d closed by the server", idle, silent, held)
}

func TestConnectionCapHoldsAndIdleOnesAreReaped(t *testing.T) {
	const maxConns = 4
	s, l, base := serveLimited(t, HTTPLimits{MaxConns: maxConns, IdleTimeout: time.Second})
	addr := base[len("http://"):]
	reaped := make(chan error, maxConns)
	for range maxConns {
		c, br := keepAlive(t, addr)
		go func() { reaped <- closedByServer(c, br) }()
	}
	// Every slot is held by an idle, unauthenticated client: an operator's call must wait for
	// one to be reaped, then succeed.
	req, err := http.NewRequest(http.MethodGet, base+"/v1/workspaces", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.OperatorToken())
	hc := &http.Client{Timeout: guard, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("authenticated call after the idle clients: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("authenticated call: %s", resp.Status)
	}
	for range maxConns {
		if err := <-reaped; err != nil {
			t.Errorf("idle connection not reaped: %v", err)
		}
	}
	maxOpen, accepted := l.stats()
	if maxOpen > maxConns {
		t.Errorf("%d connections were open at once server-side; the cap is %d", maxOpen, maxConns)
	}
	if accepted < maxConns+1 {
		t.Errorf("accepted %d connections, want at least %d", accepted, maxConns+1)
	}
	t.Logf("http-cap: %d idle clients held %d slots, 1 authenticated call served after they were reaped; at most %d open at once (cap %d)",
		maxConns, maxConns, maxOpen, maxConns)
}

func TestOversizedHeadersAreRefused(t *testing.T) {
	_, _, base := serveLimited(t, HTTPLimits{MaxHeaderBytes: 4 << 10})
	req, err := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Over the limit (4 KiB, and net/http's 4 KiB of slack) but within what the kernel buffers:
	// the request is written whole before the server answers. A header larger than the socket's
	// buffers raced the server's reset of the connection it refused, and under load the client's
	// write lost (connection reset by peer) before it read the 431.
	req.Header.Set("X-Padding", strings.Repeat("x", 16<<10))
	hc := &http.Client{Timeout: guard, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 16 KiB header with a 4 KiB limit: %s", resp.Status)
	}
}

func TestSecondControllerOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := New(context.Background(), Config{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{DataDir: dir, Logger: quiet})
	if protocol.CodeOf(err) != protocol.CodeUnavailable || !strings.Contains(err.Error(), "is in use by pid ") {
		t.Fatalf("second controller on %s: %v", dir, err)
	}
	first.stopRoutines()
	first.providers.Close()
	_ = first.store.Close()
	first.dataLock.Release()
	again, err := New(context.Background(), Config{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("after the first released the directory: %v", err)
	}
	again.stopRoutines()
	again.providers.Close()
	_ = again.store.Close()
	again.dataLock.Release()
}
