package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// fakeRunner is the runner's end of a session: it answers each operation by echoing the body it
// read to its end, after the header, prefixed with the operation's name — so a test sees that
// the header, the body and the half-close all crossed the tunnel in order.
func fakeRunner(t *testing.T) (owner *hub.Conn, runnerSess *yamux.Session) {
	t.Helper()
	a, b := net.Pipe()
	runnerSess, err := protocol.MuxClient(a)
	if err != nil {
		t.Fatal(err)
	}
	ownerSess, err := protocol.MuxServer(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runnerSess.Close(); ownerSess.Close() })
	go func() {
		for {
			st, err := runnerSess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				var h protocol.Header
				if err := protocol.ReadJSON(st, &h); err != nil {
					return
				}
				body, _ := io.ReadAll(st)
				_, _ = st.Write(append([]byte(h.Op+":"), body...))
			}()
		}
	}()
	hello := protocol.Hello{AllocationID: "al_1", RunnerVersion: "test", Root: "/w"}
	return hub.NewConn(ownerSess, "al_1", "ws_1", hello, 1), runnerSess
}

const secret = "s3cret"

func serveOwner(t *testing.T, c *hub.Conn) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/v1/allocations/{id}/tunnel", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := Authenticated(r, secret); !ok {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": protocol.Errorf(protocol.CodeUnauthorized, "no")})
			return
		}
		Serve(w, r, c, slog.New(slog.DiscardHandler))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestTunnelCarriesOperations(t *testing.T) {
	owner, _ := fakeRunner(t)
	srv := serveOwner(t, owner)
	c, err := Dial(context.Background(), srv.URL, "al_1", func(h http.Header) { Authorize(h, "ctl_b", secret) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.WorkspaceID != "ws_1" || c.Hello.Root != "/w" || c.Protocol != 1 {
		t.Fatalf("tunnel conn %+v: the owner's hello did not arrive", c)
	}
	// Several operations at once, each with a body larger than a stream window.
	body := bytes.Repeat([]byte("x"), 5<<20)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			st, err := c.Open("fs_write", "", 7, struct{}{})
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			go func() {
				_, _ = st.Write(body)
				st.Close() // half-close: the runner sees the body end
			}()
			got, err := io.ReadAll(st)
			if err == nil && !bytes.Equal(got, append([]byte("fs_write:"), body...)) {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("operation through the tunnel: %v", err)
		}
	}
}

func TestTunnelEndsWithTheRunnersConnection(t *testing.T) {
	owner, runnerSess := fakeRunner(t)
	srv := serveOwner(t, owner)
	c, err := Dial(context.Background(), srv.URL, "al_1", func(h http.Header) { Authorize(h, "ctl_b", secret) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runnerSess.Close()
	<-c.Done() // the owner closes the tunnel once its runner is gone
	if _, err := c.Open("fs_stat", "", 0, struct{}{}); err == nil {
		t.Fatal("an operation opened on the tunnel of a runner that is gone")
	}
}

func TestTunnelRefusesWithoutTheSecret(t *testing.T) {
	owner, _ := fakeRunner(t)
	srv := serveOwner(t, owner)
	_, err := Dial(context.Background(), srv.URL, "al_1", func(h http.Header) { Authorize(h, "ctl_b", "wrong") })
	if protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("tunnel with a wrong secret: %v; want unauthorized", err)
	}
}
