package forward

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"testing"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// A client that shuts down its writing half still gets the whole answer: the half-close is
// carried through Join as a half-close, not a close.
func TestJoinCarriesHalfClose(t *testing.T) {
	client, front := tcpPair(t)
	back, service := tcpPair(t)
	joined := make(chan struct{})
	go func() {
		Join(context.Background(), front, back, nil)
		close(joined)
	}()
	request := randomBytes(t, 300<<10)
	answer := randomBytes(t, 1<<20)
	go func() {
		_, _ = client.Write(request)
		_ = client.CloseWrite()
	}()
	got, err := io.ReadAll(service)
	if err != nil || !bytes.Equal(got, request) {
		t.Fatalf("the service read %d bytes (%v), want the %d sent then EOF", len(got), err, len(request))
	}
	// Only now, after the client's FIN arrived, the service answers.
	if _, err := service.Write(answer); err != nil {
		t.Fatalf("answer after the client's half-close: %v", err)
	}
	_ = service.CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("the client read %d bytes (%v), want the %d answered then EOF", len(got), err, len(answer))
	}
	<-joined
}

// Ends without CloseWrite (net.Pipe) are closed whole when their source ends.
func TestJoinClosesEndsWithoutHalfClose(t *testing.T) {
	client, front := net.Pipe()
	back, service := net.Pipe()
	joined := make(chan struct{})
	go func() {
		Join(context.Background(), front, back, nil)
		close(joined)
	}()
	go func() {
		_, _ = client.Write([]byte("hello"))
		_ = client.Close()
	}()
	got, err := io.ReadAll(service)
	if err != nil || string(got) != "hello" {
		t.Fatalf("the service read %q, %v", got, err)
	}
	service.Close()
	<-joined
}

// Canceling the context cuts both ends, even when neither ever ends on its own.
func TestJoinCutByContext(t *testing.T) {
	_, front := tcpPair(t)
	back, service := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	joined := make(chan struct{})
	go func() {
		Join(ctx, front, back, nil)
		close(joined)
	}()
	cancel()
	<-joined
	if _, err := io.ReadAll(service); err != nil {
		t.Fatalf("the service's end after the cut: %v", err)
	}
}

// Bytes pass through the workspace's bandwidth budget in both directions, intact: the budget's
// bucket holds what was taken from it (it refills at one byte a second, so what the test's own
// duration gives back is a few bytes).
func TestJoinPacesBothDirections(t *testing.T) {
	l := NewLimiter(Limits{MaxConns: 1, BytesPerSecond: 1})
	g, err := l.Acquire("ws")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	client, front := tcpPair(t)
	back, service := tcpPair(t)
	joined := make(chan struct{})
	go func() {
		Join(context.Background(), front, back, g)
		close(joined)
	}()
	up, down := randomBytes(t, 20<<10), randomBytes(t, 30<<10)
	go func() {
		_, _ = client.Write(up)
		_ = client.CloseWrite()
	}()
	got, err := io.ReadAll(service)
	if err != nil || !bytes.Equal(got, up) {
		t.Fatalf("upstream: %d bytes, %v", len(got), err)
	}
	go func() {
		_, _ = service.Write(down)
		_ = service.CloseWrite()
	}()
	got, err = io.ReadAll(client)
	if err != nil || !bytes.Equal(got, down) {
		t.Fatalf("downstream: %d bytes, %v", len(got), err)
	}
	<-joined
	left := l.open["ws"].bytes.Tokens()
	want := float64(copyBuffer - len(up) - len(down))
	if left > want+600 {
		t.Fatalf("the budget holds %.0f tokens after %d bytes from a bucket of %d: the bytes were not all paced", left, len(up)+len(down), copyBuffer)
	}
}
