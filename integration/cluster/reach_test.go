package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"github.com/tetherhq/tether/integration/devserver/pattern"
	"github.com/tetherhq/tether/protocol"
)

// TestClusterReachesServicesThroughPeers: a service in a workspace is reached through every
// controller of a cluster, whichever holds the runner — the others dial through their tunnel to
// it, and the bytes (and the half-close that ends a request) cross it exactly.
func TestClusterReachesServicesThroughPeers(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := c.ClientOf(t, 0)
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "reach", Provider: "local"})
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	bin := buildDevserver(t)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := cl.WriteFile(ctx, ws.ID, "devserver", f, client.WriteOptions{Mode: 0o755}); err != nil {
		t.Fatalf("put the devserver: %v", err)
	}
	if _, err := cl.StartService(ctx, ws.ID, protocol.ServiceSpec{Name: "web", Argv: []string{"./devserver"}, Ready: "http:/health"}); err != nil {
		t.Fatalf("start the devserver: %v", err)
	}

	const size = 8 << 20
	want := make([]byte, size)
	pattern.Fill(want, 0)
	wantSum := sha256.Sum256(want)
	for i := range c.Controllers {
		conn, err := c.ClientOf(t, i).DialService(ctx, ws.ID, "web")
		if err != nil {
			t.Fatalf("dial the service through controller %d: %v", i, err)
		}
		// One request, then the client's half-close: the whole answer still arrives.
		if _, err := io.WriteString(conn, "GET /bytes?n=8388608 HTTP/1.1\r\nHost: devserver\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			if err := cw.CloseWrite(); err != nil {
				t.Fatalf("half-close through controller %d: %v", i, err)
			}
		} else {
			t.Fatalf("the connection through controller %d cannot half-close (%T)", i, conn)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("answer through controller %d: %v", i, err)
		}
		hash := sha256.New()
		n, err := io.Copy(hash, resp.Body)
		conn.Close()
		if err != nil || n != size || [32]byte(hash.Sum(nil)) != wantSum {
			t.Fatalf("through controller %d: %d bytes (%v), digest match %v; want %d exact", i, n, err, [32]byte(hash.Sum(nil)) == wantSum, size)
		}
	}
	// The HTTP proxy (with the token), a preview link (without) and a websocket through the
	// proxy answer alike on every controller.
	prev, err := cl.CreatePreview(ctx, ws.ID, "web", "10m")
	if err != nil {
		t.Fatalf("make a preview link: %v", err)
	}
	pu, err := url.Parse(prev.PathURL)
	if err != nil {
		t.Fatal(err)
	}
	for i, ctl := range c.Controllers {
		base := ctl.URL()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/workspaces/"+ws.ID+"/services/web/proxy/bytes?n=1048576", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		if got := fetch(t, req); !bytes.Equal(got, want[:1<<20]) {
			t.Fatalf("proxy through controller %d: %d bytes, not the 1 MiB sent", i, len(got))
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+pu.Path+"headers", nil)
		if got := fetch(t, req); !bytes.Contains(got, []byte(`"X-Forwarded-Prefix":["`+strings.TrimSuffix(pu.Path, "/")+`"]`)) {
			t.Fatalf("preview through controller %d: %s", i, got)
		}
		wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/workspaces/" + ws.ID + "/services/web/proxy/ws/echo"
		conn, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, http.Header{"Authorization": {"Bearer " + c.Token}})
		if err != nil {
			t.Fatalf("websocket through controller %d: %v", i, err)
		}
		if err := conn.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		_, msg, err := conn.ReadMessage()
		conn.Close()
		if err != nil || string(msg) != "echo: hi" {
			t.Fatalf("websocket through controller %d: %q, %v", i, msg, err)
		}
	}
	// A port that is not the workspace's is refused alike everywhere.
	for i := range c.Controllers {
		if _, err := c.ClientOf(t, i).DialPort(ctx, ws.ID, 1); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Fatalf("port 1 through controller %d: %v; want invalid_argument", i, err)
		}
	}
}

// fetch does req and returns its body, failing the test on anything but 200.
func fetch(t *testing.T, req *http.Request) []byte {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %q (%v)", req.Method, req.URL, resp.Status, b, err)
	}
	return b
}

// buildDevserver builds integration/devserver, static, into a temporary directory.
func buildDevserver(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "devserver")
	cmd := exec.Command("go", "build", "-o", out, "../devserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the devserver: %v\n%s", err, strings.TrimSpace(string(b)))
	}
	return out
}
