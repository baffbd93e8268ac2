package controller

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/protocol"
)

// HeaderRequestID carries a request's id: a client's own when it sends a well-formed one
// (requestID), else one the controller makes; the answer always carries it back.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds a client's request id: longer ones are replaced, not cut.
const maxRequestID = 128

// requestID is the client's id when it is 1–128 characters of letters, digits and . _ : -
// (nothing a log line or a header could be bent with), else a new random one.
func requestID(client string) string {
	if n := len(client); n > 0 && n <= maxRequestID {
		ok := true
		for i := 0; i < n && ok; i++ {
			c := client[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		}
		if ok {
			return client
		}
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "req_" + hex.EncodeToString(b)
}

// byteKinds says which API routes move which kind of bytes (metrics.Bytes): the request body
// (in) or the response body (out), counted as they pass through observe. Proxied and forwarded
// connections are counted on their connection into the sandbox instead (forwardedConn), and
// snapshot captures and restores where they stream (captureOnce, restoreInto).
var byteKinds = map[string]struct{ in, out string }{
	"GET /v1/workspaces/{id}/files/{path...}":  {out: metrics.KindFileGet},
	"PUT /v1/workspaces/{id}/files/{path...}":  {in: metrics.KindFilePut},
	"PUT /v1/workspaces/{id}/uploads/{upload}": {in: metrics.KindFilePut},
	"POST /v1/snapshots/{id}/files":            {out: metrics.KindFileGet},
	"PUT /v1/workspaces/{id}/tree":             {in: metrics.KindTreeImport},
	"GET /v1/workspaces/{id}/tree":             {out: metrics.KindTreeExport},
	"GET /v1/snapshots/{id}/archive":           {out: metrics.KindSnapshotArchive},
}

// quietRoutes are polled by machines (a balancer's health check, Prometheus): logged at debug.
var quietRoutes = map[string]bool{"GET /healthz": true, "GET /metrics": true}

// observe is the outermost layer of the API: it gives each request its id (echoed in the
// answer), and once the handler returns counts it in the metrics (route pattern, status,
// typed error code, bytes by kind) and writes its request log line. routeOf names the route
// pattern a request matches ("" for none): labels and the log carry patterns, never raw paths.
func (s *Server) observe(next http.Handler, routeOf func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(r.Header.Get(HeaderRequestID))
		w.Header().Set(HeaderRequestID, id)
		route := routeOf(r)
		rec := &recorder{ResponseWriter: w}
		body := &countedBody{ReadCloser: r.Body}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = body
		}
		// Deferred, so that a handler ending its answer with http.ErrAbortHandler (a read cut
		// off midway) is counted and logged too; the panic goes on to net/http.
		defer func() {
			took := time.Since(start)
			status := rec.statusCode()
			s.metrics.Request(route, status, rec.code, took)
			if k, ok := byteKinds[route]; ok {
				if k.in != "" {
					s.metrics.Bytes(k.in, body.n)
				}
				if k.out != "" {
					s.metrics.Bytes(k.out, rec.n)
				}
			}
			level := slog.LevelInfo
			switch {
			case quietRoutes[route]:
				level = slog.LevelDebug
			case status >= 500:
				level = slog.LevelWarn
			}
			if !s.log.Enabled(r.Context(), level) {
				return
			}
			attrs := []slog.Attr{slog.String("request_id", id), slog.String("method", r.Method),
				slog.String("route", cmp.Or(route, "unmatched")), slog.Int("status", status),
				slog.Int64("bytes_in", body.n), slog.Int64("bytes_out", rec.n),
				slog.Float64("duration_ms", float64(took.Microseconds())/1000)}
			if rec.code != "" {
				attrs = append(attrs, slog.String("code", string(rec.code)))
			}
			s.log.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// countedBody counts the bytes a handler read of the request body.
type countedBody struct {
	io.ReadCloser
	n int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// recorder notes what the handler answered: the status, the bytes of the body, and the typed
// error code writeError sent (noteErrorCode). It passes Flush, Hijack and ReadFrom through, so
// streaming answers, websockets and sendfile work as they do without it.
type recorder struct {
	http.ResponseWriter
	status   int
	n        int64
	code     protocol.Code
	hijacked bool
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.n += int64(n)
	return n, err
}

func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := r.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(writerOnly{r.ResponseWriter}, src)
	}
	r.n += n
	return n, err
}

// writerOnly hides every method but Write, so io.Copy cannot come back to ReadFrom.
type writerOnly struct{ io.Writer }

func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return c, brw, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// statusCode is the status the client got: a hijacked connection (a websocket, a
// port-forward) answered its upgrade itself.
func (r *recorder) statusCode() int {
	switch {
	case r.status != 0:
		return r.status
	case r.hijacked:
		return http.StatusSwitchingProtocols
	}
	return http.StatusOK
}

// noteErrorCode tells the recorder under w, if any, the typed error the answer carries.
func noteErrorCode(w http.ResponseWriter, code protocol.Code) {
	for w != nil {
		if rec, ok := w.(*recorder); ok {
			rec.code = code
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
