package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// unavailableFor answers 503 unavailable to the first n requests and then passes them to next;
// calls counts every request.
func unavailableFor(n int32, calls *atomic.Int32, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: *protocol.Errorf(protocol.CodeUnavailable, "not now")})
			return
		}
		next(w, r)
	}
}

func answerJSON(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

// testClient is a client of addr whose retry waits run on a fake clock.
func testClient(t *testing.T, addr string, retryFor time.Duration) (*Client, *clockwork.FakeClock) {
	t.Helper()
	c, err := New(addr, "tot_test")
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClock()
	return c.WithRetryFor(retryFor).withClock(clock), clock
}

// drive runs call and, whenever it waits to retry, moves clock on by the longest wait, until call
// returns. step, when set, runs before each move (it sees the waits made so far).
func drive(t *testing.T, clock *clockwork.FakeClock, call func() error, step func(waits int)) (waits int, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		err = call()
	}()
	for clock.BlockUntilContext(ctx, 1) == nil {
		if step != nil {
			step(waits)
		}
		waits++
		clock.Advance(retryMax)
	}
	return waits, err
}

func TestGetRetriedWhileUnavailable(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(unavailableFor(3, &calls, answerJSON(api.Workspace{ID: "ws_1", Name: "one"})))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, DefaultRetryFor)
	var ws api.Workspace
	waits, err := drive(t, clock, func() (err error) { ws, err = c.GetWorkspace(context.Background(), "one"); return err }, nil)
	if err != nil || ws.ID != "ws_1" {
		t.Fatalf("GetWorkspace = %+v, %v; want ws_1 after the retries", ws, err)
	}
	if calls.Load() != 4 || waits != 3 {
		t.Fatalf("%d requests, %d waits; want 4 requests (3 unavailable) and 3 waits", calls.Load(), waits)
	}
}

// TestProxyErrorRetried: a balancer's 502, 503 or 504 (its own page, no error body of a
// controller: the controller died under the request, or none is up) is unavailable — an
// idempotent call is retried, a POST is not.
func TestProxyErrorRetried(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, "<html><body><h1>Bad Gateway</h1></body></html>")
				return
			}
			answerJSON(api.Workspace{ID: "ws_1"})(w, r)
		}))
		c, clock := testClient(t, srv.URL, DefaultRetryFor)
		var ws api.Workspace
		waits, err := drive(t, clock, func() (err error) { ws, err = c.GetWorkspace(context.Background(), "one"); return err }, nil)
		if err != nil || ws.ID != "ws_1" || calls.Load() != 2 || waits != 1 {
			t.Errorf("%d: GetWorkspace = %+v, %v after %d requests and %d waits; want ws_1 after one retry", status, ws, err, calls.Load(), waits)
		}
		calls.Store(0)
		waits, err = drive(t, clock, func() error { _, err := c.CreateSnapshot(context.Background(), "one"); return err }, nil)
		if protocol.CodeOf(err) != protocol.CodeUnavailable || calls.Load() != 1 || waits != 0 {
			t.Errorf("%d: CreateSnapshot: %v after %d requests and %d waits; want unavailable, not retried", status, err, calls.Load(), waits)
		}
		srv.Close()
	}
}

func TestNonIdempotentPostNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(unavailableFor(1, &calls, answerJSON(api.Snapshot{ID: "snap_1"})))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, DefaultRetryFor)
	waits, err := drive(t, clock, func() error { _, err := c.CreateSnapshot(context.Background(), "one"); return err }, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || calls.Load() != 1 || waits != 0 {
		t.Fatalf("CreateSnapshot: %v after %d requests and %d waits; want unavailable after 1 request and no wait", err, calls.Load(), waits)
	}
}

func TestIdempotentPostRetried(t *testing.T) {
	for name, call := range map[string]func(c *Client) error{
		"marked": func(c *Client) error { _, err := c.VerifySnapshot(context.Background(), "snap_1"); return err },
		"close --check": func(c *Client) error {
			return c.CloseWorkspace(context.Background(), "one", api.CloseRequest{Check: true}, &api.CloseCheck{})
		},
		"idempotency key": func(c *Client) error {
			return c.do(context.Background(), request{method: http.MethodPost, path: "/v1/x",
				header: http.Header{headerIdempotencyKey: {"k1"}}}, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(unavailableFor(2, &calls, answerJSON(map[string]any{})))
			defer srv.Close()
			c, clock := testClient(t, srv.URL, DefaultRetryFor)
			_, err := drive(t, clock, func() error { return call(c) }, nil)
			if err != nil || calls.Load() != 3 {
				t.Fatalf("%v after %d requests; want success on the 3rd", err, calls.Load())
			}
		})
	}
}

// freeAddr is a loopback address nothing listens on (a port the kernel just handed out).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// listenLater serves h on addr once step is called for the given wait, as a controller that
// comes up while a client retries.
func listenLater(t *testing.T, addr string, h http.Handler, at int) func(int) {
	return func(waits int) {
		if waits != at {
			return
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s again: %v", addr, err)
		}
		srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
		srv.Start()
		t.Cleanup(srv.Close)
	}
}

func TestConnectionRefusedThenListening(t *testing.T) {
	addr := freeAddr(t)
	c, clock := testClient(t, "http://"+addr, DefaultRetryFor)
	var ws api.Workspace
	waits, err := drive(t, clock, func() (err error) { ws, err = c.GetWorkspace(context.Background(), "one"); return err },
		listenLater(t, addr, answerJSON(api.Workspace{ID: "ws_1"}), 2))
	if err != nil || ws.ID != "ws_1" || waits != 3 {
		t.Fatalf("GetWorkspace = %+v, %v after %d waits; want ws_1 once the controller listened", ws, err, waits)
	}
}

// A refused connection never carried the request, so even a call that must not be repeated is
// sent again: it was not sent at all.
func TestRefusedPostRetried(t *testing.T) {
	addr := freeAddr(t)
	c, clock := testClient(t, "http://"+addr, DefaultRetryFor)
	var snap api.Snapshot
	_, err := drive(t, clock, func() (err error) { snap, err = c.CreateSnapshot(context.Background(), "one"); return err },
		listenLater(t, addr, answerJSON(api.Snapshot{ID: "snap_1"}), 0))
	if err != nil || snap.ID != "snap_1" {
		t.Fatalf("CreateSnapshot = %+v, %v; want snap_1 once the controller listened", snap, err)
	}
}

func TestRetryForZeroDisables(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(unavailableFor(1, &calls, answerJSON(api.Workspace{ID: "ws_1"})))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, 0)
	waits, err := drive(t, clock, func() error { _, err := c.GetWorkspace(context.Background(), "one"); return err }, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || calls.Load() != 1 || waits != 0 {
		t.Fatalf("%v after %d requests, %d waits; want unavailable at once", err, calls.Load(), waits)
	}
	// Refused connections too.
	c, clock = testClient(t, "http://"+freeAddr(t), 0)
	waits, err = drive(t, clock, func() error { _, err := c.GetWorkspace(context.Background(), "one"); return err }, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || waits != 0 {
		t.Fatalf("refused: %v after %d waits; want unavailable at once", err, waits)
	}
}

// The retries stop once RetryFor has passed on the clock: with every wait taking the longest
// step (1s), a 3s budget allows the first attempt and three more.
func TestRetryBudget(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(unavailableFor(1000, &calls, nil))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, 3*time.Second)
	start := clock.Now()
	waits, err := drive(t, clock, func() error { _, err := c.GetWorkspace(context.Background(), "one"); return err }, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("err = %v; want the last unavailable", err)
	}
	if calls.Load() != 4 || waits != 3 || clock.Since(start) != 3*time.Second {
		t.Fatalf("%d requests, %d waits over %s; want 4 requests and 3 waits within the 3s budget", calls.Load(), waits, clock.Since(start))
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(unavailableFor(1000, &calls, nil))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := drive(t, clock, func() error { _, err := c.GetWorkspace(ctx, "one"); return err }, func(waits int) {
		if waits == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b := retryPolicy{For: time.Hour, clock: clock}.start()
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, step := range want {
		step *= time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.next(ctx) }()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// The wait is between half the step and the step: not over before half of it...
		clock.Advance(step/2 - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("wait %d ended (%v) before half its step %s", i, err, step)
		default:
		}
		// ...and over by the whole of it.
		clock.Advance(step/2 + time.Nanosecond)
		if err := <-done; err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
		cancel()
	}
}

// onlyReader hides every interface but io.Reader: a stream that cannot be read twice.
type onlyReader struct{ io.Reader }

// A stream the controller began to read is not sent again: its start is gone. A body in memory
// or a regular file is, whole (from where the file was when the call began).
func TestStreamBodyNotReplayed(t *testing.T) {
	var bodies []string
	var calls atomic.Int32
	srv := httptest.NewServer(func() http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, string(b))
			unavailableFor(1, &calls, answerJSON(protocol.FsWriteResult{Path: "f"}))(w, r)
		}
	}())
	defer srv.Close()

	c, clock := testClient(t, srv.URL, DefaultRetryFor)
	_, err := drive(t, clock, func() error {
		_, err := c.WriteFile(context.Background(), "one", "f", onlyReader{strings.NewReader("stream")}, WriteOptions{})
		return err
	}, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || len(bodies) != 1 {
		t.Fatalf("stream: %v after %d requests; want unavailable after 1", err, len(bodies))
	}

	bodies = nil
	calls.Store(0)
	_, err = drive(t, clock, func() error {
		_, err := c.WriteFile(context.Background(), "one", "f", bytes.NewReader([]byte("memory")), WriteOptions{})
		return err
	}, nil)
	if err != nil || strings.Join(bodies, ",") != "memory,memory" {
		t.Fatalf("memory: %v with bodies %q; want the whole body twice", err, bodies)
	}

	f, err := os.CreateTemp(t.TempDir(), "body")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("skipped;file"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(int64(len("skipped;")), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	bodies = nil
	calls.Store(0)
	_, err = drive(t, clock, func() error {
		_, err := c.WriteFile(context.Background(), "one", "f", f, WriteOptions{})
		return err
	}, nil)
	if err != nil || strings.Join(bodies, ",") != "file,file" {
		t.Fatalf("file: %v with bodies %q; want the rest of the file twice", err, bodies)
	}
}

// A stream nothing read yet (the connection was refused) is sent once the controller listens.
func TestUnreadStreamRetried(t *testing.T) {
	addr := freeAddr(t)
	var got string
	h := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		answerJSON(protocol.FsWriteResult{Path: "f"})(w, r)
	}
	c, clock := testClient(t, "http://"+addr, DefaultRetryFor)
	_, err := drive(t, clock, func() error {
		_, err := c.WriteFile(context.Background(), "one", "f", onlyReader{strings.NewReader("stream")}, WriteOptions{})
		return err
	}, listenLater(t, addr, http.HandlerFunc(h), 1))
	if err != nil || got != "stream" {
		t.Fatalf("WriteFile: %v, controller got %q; want the whole stream once it listened", err, got)
	}
}

// Exec retries its dial while the controller is unavailable; the command runs once.
func TestExecDialRetried(t *testing.T) {
	var calls, commands atomic.Int32
	up := websocket.Upgrader{}
	srv := httptest.NewServer(unavailableFor(2, &calls, func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		if _, _, err := conn.ReadMessage(); err != nil { // the command's arguments
			return
		}
		commands.Add(1)
		exit, _ := json.Marshal(protocol.ExecExit{ExitCode: 7})
		_ = conn.WriteMessage(websocket.BinaryMessage, append([]byte{byte(protocol.ChanExit)}, exit...))
	}))
	defer srv.Close()
	c, clock := testClient(t, srv.URL, DefaultRetryFor)
	var exit protocol.ExecExit
	waits, err := drive(t, clock, func() (err error) {
		exit, err = c.Exec(context.Background(), "one", protocol.ExecArgs{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
		return err
	}, nil)
	if err != nil || exit.ExitCode != 7 || waits != 2 || commands.Load() != 1 {
		t.Fatalf("Exec = %+v, %v after %d waits, %d commands; want exit 7 after 2 waits, 1 command", exit, err, waits, commands.Load())
	}
}
