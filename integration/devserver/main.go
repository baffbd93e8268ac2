// Command devserver is what the service-reaching tests and benchmarks put in a sandbox: a small
// web app shaped like a dev server. It listens on 127.0.0.1:$PORT (or $LISTEN_HOST:$PORT) and
// serves:
//
//	/              an HTML page that loads static/app.js by a relative path
//	/static/app.js a script that opens a websocket (ws/echo, relative) and writes what it hears
//	               into the page
//	/ws/echo       a websocket that echoes each message, prefixed "echo: "
//	/sse           server-sent events: $n events (default 3) "tick N", then the stream ends
//	/bytes?n=N     N bytes of a fixed pattern (package pattern), streamed
//	/upload        reads the request body and answers its length and SHA-256
//	/headers       the request's method, path, host and headers as JSON
//	/health        200
//
// Each request's path is logged to stdout, as a dev server does.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/integration/devserver/pattern"
)

const page = `<!doctype html>
<html><head><title>devserver</title><script src="static/app.js"></script></head>
<body><h1 id="title">devserver page</h1><p id="ws">waiting</p></body></html>
`

const script = `window.addEventListener("load", function () {
  var p = document.getElementById("ws");
  var u = new URL("ws/echo", window.location.href);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  var s = new WebSocket(u.href);
  s.onopen = function () { s.send("hello from the page"); };
  s.onmessage = function (e) { p.textContent = e.data; };
  s.onerror = function () { p.textContent = "websocket error"; };
});
`

func main() {
	host := os.Getenv("LISTEN_HOST")
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, os.Getenv("PORT"))
	srv := &http.Server{Addr: addr, Handler: logged(routes()), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, "devserver listening on", addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("request", r.Method, r.URL.Path)
		h.ServeHTTP(w, r)
	})
}

func routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page)
	})
	mux.HandleFunc("GET /static/app.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, script)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /ws/echo", echo)
	mux.HandleFunc("GET /sse", sse)
	mux.HandleFunc("GET /bytes", patternBytes)
	mux.HandleFunc("POST /upload", upload)
	mux.HandleFunc("/headers", headers)
	return mux
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		kind, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(kind, append([]byte("echo: "), msg...)); err != nil {
			return
		}
	}
}

func sse(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n <= 0 {
		n = 3
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i := 1; i <= n; i++ {
		if _, err := fmt.Fprintf(w, "data: tick %d\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		// Events apart in time: a proxy that buffers the stream shows here.
		time.Sleep(50 * time.Millisecond)
	}
}

func patternBytes(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "n: a byte count", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	bw := bufio.NewWriterSize(w, 256<<10)
	buf := make([]byte, 64<<10)
	for off := int64(0); off < n; {
		k := min(int64(len(buf)), n-off)
		pattern.Fill(buf[:k], off)
		if _, err := bw.Write(buf[:k]); err != nil {
			return
		}
		off += k
	}
	_ = bw.Flush()
}

func upload(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))})
}

func headers(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
		"host": r.Host, "headers": r.Header})
}
