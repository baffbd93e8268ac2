package providertest

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hello is what the fake runner reports when it starts (Kind "hello") and
// when it is asked to stop (Kind "bye").
type Hello struct {
	Kind       string `json:"kind"`
	Version    string `json:"version"`
	Allocation string `json:"allocation"`
	Workspace  string `json:"workspace"`
	Token      string `json:"token"`
	// TokenInEnv is true if the token was still in the runner's
	// environment after it removed it (it must not be).
	TokenInEnv bool     `json:"token_in_env"`
	Root       string   `json:"root"`
	Cwd        string   `json:"cwd"`
	UID        int      `json:"uid"`
	GID        int      `json:"gid"`
	PID        int      `json:"pid"`
	Env        []string `json:"env"`
	// MarkerBefore is the content of the file an earlier start left in the
	// workspace root, "" on the first start.
	MarkerBefore string `json:"marker_before"`
	RootWritable bool   `json:"root_writable"`
	Error        string `json:"error,omitempty"`
	// Via is how the report reached the fake controller, as the fake controller saw it: "tcp"
	// (the controller URL) or "unix" (the controller socket, CreateRequest.ControllerSocket).
	Via string `json:"-"`
}

// Getenv returns the value of key in the runner's reported environment.
func (h Hello) Getenv(key string) string {
	for _, kv := range h.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// fakeController collects the fake runners' reports, on a TCP address (url) and on a unix
// socket (socket), as the real controller listens.
type fakeController struct {
	url    string
	socket string
	mu     sync.Mutex
	got    []Hello
	ch     chan struct{} // closed and replaced on every report
}

func startFakeController(t *testing.T, listen string) *fakeController {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("fake controller: %v", err)
	}
	fc := &fakeController{url: "http://" + l.Addr().String(), ch: make(chan struct{})}
	// Like the controller's runner socket: a directory others may pass through (0711) and a
	// socket anyone there may connect to (0666). The path is kept short for a socket address.
	dir, err := os.MkdirTemp("", "pt-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fc.socket = filepath.Join(dir, "runner.sock")
	ul, err := net.Listen("unix", fc.socket)
	if err == nil {
		err = os.Chmod(dir, 0o711)
	}
	if err == nil {
		err = os.Chmod(fc.socket, 0o666)
	}
	if err != nil {
		t.Fatalf("fake controller socket: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /providertest/report", func(w http.ResponseWriter, r *http.Request) {
		var h Hello
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&h); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.Via = "tcp"
		if _, ok := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr); ok {
			h.Via = "unix"
		}
		fc.mu.Lock()
		fc.got = append(fc.got, h)
		close(fc.ch)
		fc.ch = make(chan struct{})
		fc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() { _ = srv.Serve(ul) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fc
}

// wait returns the first report of kind for allocation carrying token
// (any token if ""), or fails the test after timeout.
func (fc *fakeController) wait(t *testing.T, kind, allocation, token string, timeout time.Duration) Hello {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		fc.mu.Lock()
		for _, h := range fc.got {
			if h.Kind == kind && h.Allocation == allocation && (token == "" || h.Token == token) {
				fc.mu.Unlock()
				return h
			}
		}
		ch := fc.ch
		fc.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %s from the runner of %s within %s", kind, allocation, timeout)
		}
	}
}
