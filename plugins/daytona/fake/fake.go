// FAKE — not Daytona. This file is part of an in-repo stand-in for the
// Daytona REST API, for tests only.

package fake

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sandbox states, as Daytona documents them (SandboxState); the fake
// passes through the transitional ones.
const (
	StateCreating     = "creating"
	StatePendingBuild = "pending_build"
	StateStarting     = "starting"
	StateStarted      = "started"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateArchiving    = "archiving"
	StateArchived     = "archived"
	StateRestoring    = "restoring"
	StateDestroyed    = "destroyed"
)

// Sandbox is the documented Sandbox object: the required fields, and the
// optional ones the fake keeps.
type Sandbox struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target"`
	Snapshot            string            `json:"snapshot,omitempty"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	BuildInfo           *BuildInfo        `json:"buildInfo,omitempty"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

// BuildInfo is the documented BuildInfo of a sandbox built from an image.
type BuildInfo struct {
	DockerfileContent string `json:"dockerfileContent"`
	SnapshotRef       string `json:"snapshotRef"`
	CreatedAt         string `json:"createdAt"`
	UpdatedAt         string `json:"updatedAt"`
}

// Exchange is one request the fake answered, as it went over the wire:
// what a test checks against the published spec. Toolbox requests carry
// their path below the sandbox's toolbox base in SpecPath.
type Exchange struct {
	Toolbox    bool
	Method     string
	URL        string
	SpecPath   string
	Header     http.Header
	Body       []byte
	Status     int
	RespHeader http.Header
	RespBody   []byte
	// Truncated: RespBody holds only the first part of a long body.
	Truncated bool
}

// Server is a fake Daytona API and toolbox proxy. Create it with New.
type Server struct {
	api, tb *httptest.Server
	dir     string
	key     string
	observe func(Exchange)

	mu       sync.Mutex
	boxes    map[string]*box // by id
	calls    []string
	commands []string

	// Behaviour, under mu.
	steps        int // requests a transitional state lasts
	restoreSteps int // requests restoring lasts
	listLag      int // list requests a new sandbox is missing from
	grace        time.Duration
	limited      int // requests still answered 429
	retryAfter   int
	throttled    int // 429s sent

	// Faults, under mu.
	createOK          int // creates that succeed before failCreate applies; -1: no limit
	loseCreates       int
	loseStatus        int
	ignoreAutoDelete  bool
	failUploadAfter   int64            // bytes; -1: off
	failDownloadAfter int64            // bytes; -1: off
	sizeDelta         map[string]int64 // by file name: added to the listed size
	hostileEntries    []string         // extra names every listing reports
}

// Option changes a fake's behaviour from the start.
type Option func(*Server)

// Observe has fn see every exchange once it is answered (from the
// servers' goroutines).
func Observe(fn func(Exchange)) Option { return func(s *Server) { s.observe = fn } }

// New starts a fake that accepts only requests bearing key, keeps its
// sandboxes' directories under dir, and stops when the test ends.
func New(t testing.TB, dir, key string, opts ...Option) *Server {
	s := &Server{dir: dir, key: key, boxes: make(map[string]*box), createOK: -1, failUploadAfter: -1, failDownloadAfter: -1,
		sizeDelta: map[string]int64{}, steps: 2, restoreSteps: 4, grace: 10 * time.Second}
	for _, o := range opts {
		o(s)
	}
	// The toolbox starts first: the API's handlers read its URL, and only starting the API
	// after it orders that write before the API's goroutines.
	s.tb = httptest.NewServer(s.guard(true, s.toolboxRoutes()))
	s.api = httptest.NewServer(s.guard(false, s.apiRoutes()))
	t.Cleanup(s.Close)
	return s
}

// URL is the API base URL (what the provider's api_url option takes).
func (s *Server) URL() string { return s.api.URL }

// ToolboxProxyURL is what sandbox records carry as toolboxProxyUrl.
func (s *Server) ToolboxProxyURL() string { return s.tb.URL + "/toolbox" }

// Close kills every sandbox's processes and stops the servers.
func (s *Server) Close() {
	s.mu.Lock()
	var all []*proc
	for _, b := range s.boxes {
		all = append(all, b.takeProcs()...)
	}
	s.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
	s.api.Close()
	s.tb.Close()
}

// Steps sets how many requests about a sandbox a transitional state
// (creating, starting, stopping, archiving) lasts, and restoring.
func (s *Server) Steps(n, restore int) {
	s.mu.Lock()
	s.steps, s.restoreSteps = max(n, 0), max(restore, 0)
	s.mu.Unlock()
}

// ListLag makes a new sandbox missing from the next n list requests, as
// Daytona's eventually consistent list can.
func (s *Server) ListLag(n int) { s.mu.Lock(); s.listLag = n; s.mu.Unlock() }

// RateLimit answers the next n requests 429 with a Retry-After-<limit>
// header of seconds.
func (s *Server) RateLimit(n, seconds int) {
	s.mu.Lock()
	s.limited, s.retryAfter = n, seconds
	s.mu.Unlock()
}

// Throttled is how many 429s the fake sent.
func (s *Server) Throttled() int { s.mu.Lock(); defer s.mu.Unlock(); return s.throttled }

// SessionGrace is how long deleting a session waits after SIGTERM before
// SIGKILL (default 10 s).
func (s *Server) SessionGrace(d time.Duration) { s.mu.Lock(); s.grace = d; s.mu.Unlock() }

// FailCreateAfter lets n more creates succeed, then fails each one with 500
// without making a sandbox. n < 0 turns it off.
func (s *Server) FailCreateAfter(n int) { s.mu.Lock(); s.createOK = n; s.mu.Unlock() }

// LoseCreateResponses makes the next n creates make their sandbox and then
// answer 500, as if the response were lost.
func (s *Server) LoseCreateResponses(n int) {
	s.FailCreatesAfterMaking(n, http.StatusInternalServerError)
}

// FailCreatesAfterMaking makes the next n creates make their sandbox and
// then answer status (a 4xx too: Daytona writes the row first).
func (s *Server) FailCreatesAfterMaking(n, status int) {
	s.mu.Lock()
	s.loseCreates, s.loseStatus = n, status
	s.mu.Unlock()
}

// ArchiveOnNextRead makes sandbox id read back archived (its processes are
// killed, as when Daytona archived it meanwhile) on the first read after
// its next auto-delete update: the fresh read that confirms retention.
func (s *Server) ArchiveOnNextRead(id string) { s.arm(id, StateArchived) }

// ResumeOnNextRead makes sandbox id read back started (resumed, without any
// of its processes) on the first read after its next auto-delete update.
func (s *Server) ResumeOnNextRead(id string) { s.arm(id, StateStarted) }

func (s *Server) arm(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[id]; b != nil {
		b.onRead, b.armedOnRead = state, false
	}
}

// IgnoreAutoDelete makes auto-delete updates answer 200 and change nothing.
func (s *Server) IgnoreAutoDelete(on bool) { s.mu.Lock(); s.ignoreAutoDelete = on; s.mu.Unlock() }

// FailUploadAfter makes uploads fail with 500 after writing n bytes of the
// file in place (as a broken stream would). n < 0: off.
func (s *Server) FailUploadAfter(n int64) { s.mu.Lock(); s.failUploadAfter = n; s.mu.Unlock() }

// FailDownloadAfter makes downloads send the full Content-Length header,
// then only n bytes, then break the connection. n < 0: off.
func (s *Server) FailDownloadAfter(n int64) { s.mu.Lock(); s.failDownloadAfter = n; s.mu.Unlock() }

// MisreportSize makes listings report files named name with delta added
// to their real size (a lying or racing sandbox). delta 0: off.
func (s *Server) MisreportSize(name string, delta int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if delta == 0 {
		delete(s.sizeDelta, name)
		return
	}
	s.sizeDelta[name] = delta
}

// ListHostile makes every listing also report a file with this name (such
// as "../evil"), as a hostile sandbox might. "" turns it off.
func (s *Server) ListHostile(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		s.hostileEntries = nil
		return
	}
	s.hostileEntries = append(s.hostileEntries, name)
}

// Calls returns the mutating requests received so far ("POST /sandbox/ID/stop";
// toolbox calls as "POST /toolbox/ID/files/upload-v2").
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Commands returns the text of every command the toolbox was asked to run
// (session exec and process/execute), as Daytona logs them.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// Sandboxes returns a copy of every sandbox.
func (s *Server) Sandboxes() []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sandbox
	for _, b := range s.boxes {
		out = append(out, b.sb)
	}
	return out
}

// Get returns a sandbox by id or name.
func (s *Server) Get(idOrName string) (Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.find(idOrName); b != nil {
		return b.sb, true
	}
	return Sandbox{}, false
}

// Dir returns the directory backing sandbox id.
func (s *Server) Dir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[id]; b != nil {
		return b.dir
	}
	return ""
}

// guard checks the key, applies the rate limit, records mutating calls
// and shows each exchange to the observer.
func (s *Server) guard(toolbox bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ex *Exchange
		if s.observe != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			ex = &Exchange{Toolbox: toolbox, Method: r.Method, URL: r.URL.String(), SpecPath: specPath(toolbox, r.URL.Path),
				Header: r.Header.Clone(), Body: body}
			rec := &recorder{ResponseWriter: w, status: http.StatusOK}
			w = rec
			defer func() {
				ex.Status, ex.RespHeader, ex.RespBody, ex.Truncated = rec.status, rec.Header().Clone(), rec.body.Bytes(), rec.truncated
				s.observe(*ex)
			}()
		}
		if r.Header.Get("Authorization") != "Bearer "+s.key || s.key == "" {
			errorFor(toolbox, w, r, http.StatusUnauthorized, "Unauthorized")
			return
		}
		s.mu.Lock()
		if s.limited > 0 {
			s.limited--
			s.throttled++
			wait := s.retryAfter
			s.mu.Unlock()
			// Daytona's throttler names its header after the limit hit.
			w.Header().Set("Retry-After-sandbox-lifecycle", strconv.Itoa(wait))
			errorFor(toolbox, w, r, http.StatusTooManyRequests, "ThrottlerException: Too Many Requests")
			return
		}
		if r.Method != http.MethodGet {
			s.calls = append(s.calls, r.Method+" "+r.URL.Path)
		}
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// specPath is a toolbox path below /toolbox/{sandboxId}.
func specPath(toolbox bool, p string) string {
	if !toolbox {
		return p
	}
	rest := strings.TrimPrefix(p, "/toolbox/")
	if _, after, ok := strings.Cut(rest, "/"); ok {
		return "/" + after
	}
	return p
}

// recorder keeps a copy of the answer's first MiB for the observer.
type recorder struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

func (r *recorder) Write(b []byte) (int, error) {
	if room := 1<<20 - r.body.Len(); room > 0 {
		r.body.Write(b[:min(len(b), room)])
	}
	if r.body.Len()+len(b) > 1<<20 {
		r.truncated = true
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// apiError writes the API's error body, NestJS's {statusCode, message,
// error}.
func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
}

// tbError writes the toolbox daemon's ErrorResponse {statusCode, message,
// path, method, timestamp}.
func tbError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, map[string]any{"statusCode": status, "message": msg, "path": r.URL.Path, "method": r.Method,
		"timestamp": time.Now().UTC().Format(time.RFC3339)})
}

// errorFor writes the error body of the server a request came to.
func errorFor(toolbox bool, w http.ResponseWriter, r *http.Request, status int, msg string) {
	if toolbox {
		tbError(w, r, status, msg)
		return
	}
	apiError(w, status, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomID() string {
	raw := make([]byte, 8)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}
