package runner

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/protocol"
)

// A controller on a unix socket is dialed through the directory opened in New: once the path to
// it no longer resolves (here it is renamed away; in a container its ancestors are closed to the
// runner's file uid), the runner still connects, every time.
func TestUnixControllerDialedThroughItsDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "run")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "runner.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket at %s: %v", sock, err)
	}
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.ConnectPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err == nil {
			_ = c.WriteMessage(websocket.TextMessage, []byte("hi"))
			c.Close()
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	d, err := newControllerDial("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if d.url != "ws://controller"+protocol.ConnectPath {
		t.Fatalf("websocket URL %q", d.url)
	}
	if err := os.Rename(filepath.Join(base, "a"), filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Fatal("the socket's path still resolves")
	}
	// A proxy in the environment is not used for a socket.
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h := http.Header{}
		h.Set("Authorization", "Bearer tok")
		ws, _, err := d.dialer().DialContext(ctx, d.url, h)
		cancel()
		if err != nil {
			t.Fatalf("dial %d through the held directory: %v", i, err)
		}
		_, msg, err := ws.ReadMessage()
		ws.Close()
		if err != nil || string(msg) != "hi" {
			t.Fatalf("read: %q, %v", msg, err)
		}
	}
}

func TestControllerURLs(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:7420":        "ws://127.0.0.1:7420" + protocol.ConnectPath,
		"https://ctl.example/base/":    "wss://ctl.example/base" + protocol.ConnectPath,
		"ws://[::1]:1":                 "ws://[::1]:1" + protocol.ConnectPath,
		"unix://" + t.TempDir() + "/s": "ws://controller" + protocol.ConnectPath,
	} {
		d, err := newControllerDial(in)
		if err != nil || d.url != want {
			t.Errorf("newControllerDial(%q) = %+v, %v; want %s", in, d, err, want)
		}
	}
	for _, bad := range []string{"ftp://x", "unix://host/run/s", "unix://relative", "unix:///run/../etc/s", "unix:///", "unix:///nonexistent-dir-xyz/s", "::"} {
		if d, err := newControllerDial(bad); err == nil {
			t.Errorf("newControllerDial(%q) = %+v, want an error", bad, d)
		}
	}
}
