package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// httpRef is the file rows' plain reference: a small Go HTTP server on 127.0.0.1 that stores a
// PUT body durably (a temporary file, fsync, rename) and serves GETs from its directory, driven
// by curl. It is what a transfer costs with no sandbox boundary, no verification and no
// multiplexing — the floor tether's put and get are measured against.
type httpRef struct {
	dir string
	srv *http.Server
	url string
}

func startHTTPRef(dir string) (*httpRef, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &httpRef{dir: dir, url: "http://" + ln.Addr().String() + "/f"}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	go h.srv.Serve(ln)
	return h, nil
}

func (h *httpRef) serve(w http.ResponseWriter, r *http.Request) {
	p := filepath.Join(h.dir, "f")
	switch r.Method {
	case http.MethodGet:
		http.ServeFile(w, r, p)
	case http.MethodPut:
		tmp, err := os.CreateTemp(h.dir, ".put-")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer os.Remove(tmp.Name())
		_, err = io.Copy(tmp, r.Body)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), p)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func (h *httpRef) close() { h.srv.Close() }

// put is `curl -T FILE` to the server, which fsyncs before it answers.
func (h *httpRef) put(ctx context.Context, f hostFile) (time.Duration, error) {
	return timed(func() error {
		out, err := exec.CommandContext(ctx, "curl", "-sSf", "-T", f.path, h.url).CombinedOutput()
		if err != nil {
			return fmt.Errorf("curl -T: %v: %s", err, out)
		}
		return nil
	})
}

// get is `curl URL | sha256sum`: the bytes counted and hashed, as tether's get row does.
func (h *httpRef) get(ctx context.Context, f hostFile) (time.Duration, error) {
	var got string
	took, err := timed(func() error {
		out, err := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("curl -sSf '%s' | sha256sum", h.url)).Output()
		got = string(out)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("curl | sha256sum: %w", err)
	}
	if len(got) < 64 || got[:64] != f.sha {
		return 0, fmt.Errorf("curl got sha256 %.64s, want %s", got, f.sha)
	}
	return took, nil
}
