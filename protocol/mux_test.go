package protocol

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
)

// muxPair connects a yamux client to a yamux server over a real websocket. The server session is
// handed to serve, which runs in the HTTP handler until it returns.
func muxPair(t *testing.T, serve func(*yamux.Session, *WSConn)) (*yamux.Session, *WSConn) {
	t.Helper()
	up := websocket.Upgrader{EnableCompression: false}
	var handlers sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		conn := NewWSConn(ws)
		defer conn.Close()
		sess, err := MuxServer(conn)
		if err != nil {
			t.Errorf("MuxServer: %v", err)
			return
		}
		defer sess.Close()
		serve(sess, conn)
	}))
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn := NewWSConn(ws)
	sess, err := MuxClient(conn)
	if err != nil {
		t.Fatalf("MuxClient: %v", err)
	}
	t.Cleanup(func() {
		sess.Close()
		conn.Close()
		handlers.Wait()
		srv.Close()
	})
	return sess, conn
}

// echo answers every stream with what it reads, then half-closes it.
func echo(sess *yamux.Session, _ *WSConn) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer st.Close()
			_, _ = io.Copy(st, st)
		})
	}
}

func TestWSConnYamuxEcho(t *testing.T) {
	const streams = 8
	size := 8 << 20
	if testing.Short() {
		size = 1 << 20
	}
	sess, _ := muxPair(t, echo)
	var wg sync.WaitGroup
	errs := make(chan string, 2*streams)
	for i := range streams {
		data := randBytes(uint64(100+i), size)
		want := sha256.Sum256(data)
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatalf("open stream %d: %v", i, err)
		}
		wg.Go(func() {
			defer st.Close() // half-close: the echo sees EOF and closes its side
			if _, err := io.Copy(st, bytes.NewReader(data)); err != nil {
				errs <- "write: " + err.Error()
			}
		})
		wg.Go(func() {
			h := sha256.New()
			n, err := io.Copy(h, st)
			if err != nil {
				errs <- "read: " + err.Error()
				return
			}
			if n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]) {
				errs <- "stream echoed different bytes"
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("echo streams did not finish")
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if sess.IsClosed() {
		t.Fatal("session closed after the streams finished")
	}
}

// waitClosed waits for ch to close.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not close", what)
	}
}

func TestServerCloseEndsClientSession(t *testing.T) {
	for _, how := range []string{"session", "conn"} {
		t.Run(how, func(t *testing.T) {
			ready := make(chan struct{})
			sess, conn := muxPair(t, func(s *yamux.Session, c *WSConn) {
				// Prove the link works, then drop it.
				st, err := s.AcceptStream()
				if err != nil {
					t.Errorf("accept: %v", err)
					return
				}
				var h Header
				if err := ReadJSON(st, &h); err != nil {
					t.Errorf("read header: %v", err)
				}
				<-ready
				if how == "session" {
					s.Close()
				} else {
					c.Close()
				}
			})
			st, err := sess.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(st, Header{Op: OpHello}); err != nil {
				t.Fatal(err)
			}
			close(ready)
			waitClosed(t, "client session", sess.CloseChan())
			waitClosed(t, "client WSConn", conn.Done())
			if !sess.IsClosed() {
				t.Fatal("IsClosed = false after the server closed")
			}
			if _, err := st.Read(make([]byte, 1)); err == nil {
				t.Fatal("stream still readable after the session closed")
			}
			if _, err := sess.OpenStream(); err == nil {
				t.Fatal("opened a stream on a closed session")
			}
			if _, err := conn.Write([]byte("x")); err == nil {
				t.Fatal("write on a closed WSConn succeeded")
			}
		})
	}
}

func TestWSConnSkipsTextMessages(t *testing.T) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.TextMessage, []byte("ignored"))
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("ab"))
		_ = ws.WriteMessage(websocket.BinaryMessage, nil)
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("cd"))
		_, _, _ = ws.ReadMessage() // wait for the client to go
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := NewWSConn(ws)
	defer conn.Close()
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "abcd" {
		t.Fatalf("read %q, %v; want the binary messages' bytes, in order", got, err)
	}
}
