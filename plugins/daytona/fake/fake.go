// FAKE — not Daytona. This file is part of an in-repo stand-in for the
// Daytona REST API, for tests only.

package fake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Sandbox states, as Daytona documents them.
const (
	StateStarted   = "started"
	StateStopped   = "stopped"
	StateArchived  = "archived"
	StateDestroyed = "destroyed"
)

// Sandbox is the documented Sandbox object (the fields the fake keeps).
type Sandbox struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target"`
	Snapshot            string            `json:"snapshot,omitempty"`
	CPU                 int               `json:"cpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
}

// box is one fake sandbox.
type box struct {
	sb    Sandbox
	dir   string // the real directory backing the sandbox
	procs []*proc
	// sessions are the process sessions created in the toolbox.
	sessions map[string]bool
	// onRead sets the state on the read after the next auto-delete update.
	onRead      string
	armedOnRead bool
}

// Server is a fake Daytona API. Create it with New.
type Server struct {
	srv *httptest.Server
	dir string
	key string

	mu    sync.Mutex
	boxes map[string]*box // by id
	calls []string

	// Faults, under mu.
	createOK          int // creates that succeed before failCreate applies; -1: no limit
	loseCreates       int
	ignoreAutoDelete  bool
	failUploadAfter   int64            // bytes; -1: off
	failDownloadAfter int64            // bytes; -1: off
	sizeDelta         map[string]int64 // by file name: added to the listed size
	hostileEntries    []string         // extra names every listing reports
}

// New starts a fake that accepts only requests bearing key, keeps its
// sandboxes' directories under dir, and stops when the test ends.
func New(t testing.TB, dir, key string) *Server {
	s := &Server{dir: dir, key: key, boxes: make(map[string]*box), createOK: -1, failUploadAfter: -1, failDownloadAfter: -1, sizeDelta: map[string]int64{}}
	s.srv = httptest.NewServer(s.routes())
	t.Cleanup(s.Close)
	return s
}

// URL is the API base URL (what the provider's api_url option takes).
func (s *Server) URL() string { return s.srv.URL }

// Close kills every sandbox's processes and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	var all []*proc
	for _, b := range s.boxes {
		all = append(all, b.procs...)
		b.procs = nil
	}
	s.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
	s.srv.Close()
}

// FailCreateAfter lets n more creates succeed, then fails each one with 500
// without making a sandbox. n < 0 turns it off.
func (s *Server) FailCreateAfter(n int) { s.mu.Lock(); s.createOK = n; s.mu.Unlock() }

// LoseCreateResponses makes the next n creates make their sandbox and then
// answer 500, as if the response were lost.
func (s *Server) LoseCreateResponses(n int) { s.mu.Lock(); s.loseCreates = n; s.mu.Unlock() }

// ArchiveOnNextRead makes sandbox id read back archived (its processes are
// stopped, as when Daytona archived it meanwhile) on the first read after
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
// file (the partial file is left, as a broken stream would). n < 0: off.
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

// Calls returns the mutating requests received so far ("POST /sandbox/ID/stop").
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
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

// Plant makes a started sandbox directly, as another tool would (labels as
// given), and returns its id.
func (s *Server) Plant(name string, labels map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.newBox(Sandbox{Name: name, Labels: labels})
	if err != nil {
		panic(err)
	}
	return b.sb.ID
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandbox", s.create)
	mux.HandleFunc("GET /sandbox", s.list)
	mux.HandleFunc("GET /sandbox/{id}", s.get)
	mux.HandleFunc("DELETE /sandbox/{id}", s.delete)
	mux.HandleFunc("POST /sandbox/{id}/start", s.start)
	mux.HandleFunc("POST /sandbox/{id}/stop", s.stop)
	mux.HandleFunc("POST /sandbox/{id}/archive", s.archive)
	mux.HandleFunc("POST /sandbox/{id}/autodelete/{interval}", s.autoDelete)
	mux.HandleFunc("GET /sandbox/{id}/ports/{port}/preview-url", s.preview)
	mux.HandleFunc("GET /toolbox/{id}/toolbox/project-dir", s.projectDir)
	mux.HandleFunc("POST /toolbox/{id}/toolbox/files/upload", s.upload)
	mux.HandleFunc("GET /toolbox/{id}/toolbox/files", s.listFiles)
	mux.HandleFunc("GET /toolbox/{id}/toolbox/files/download", s.download)
	mux.HandleFunc("POST /toolbox/{id}/toolbox/process/session", s.createSession)
	mux.HandleFunc("POST /toolbox/{id}/toolbox/process/session/{session}/exec", s.exec)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.key || s.key == "" {
			apiError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		if r.Method != http.MethodGet {
			s.mu.Lock()
			s.calls = append(s.calls, r.Method+" "+r.URL.Path)
			s.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
}

// apiError writes Daytona's documented error body.
func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// find returns the box with id or name; mu held.
func (s *Server) find(idOrName string) *box {
	if b := s.boxes[idOrName]; b != nil {
		return b
	}
	for _, b := range s.boxes {
		if b.sb.Name == idOrName {
			return b
		}
	}
	return nil
}

// newBox makes a started sandbox with a real directory; mu held.
func (s *Server) newBox(sb Sandbox) (*box, error) {
	if sb.Name != "" && s.find(sb.Name) != nil {
		return nil, fmt.Errorf("conflict")
	}
	sb.ID = randomID()
	if sb.Name == "" {
		sb.Name = sb.ID
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	sb.State = StateStarted
	dir := filepath.Join(s.dir, sb.ID, "home", "daytona")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b := &box{sb: sb, dir: dir, sessions: map[string]bool{}}
	s.boxes[sb.ID] = b
	return b, nil
}

// createBody is the documented CreateSandbox body.
type createBody struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	Target              string            `json:"target"`
	Labels              map[string]string `json:"labels"`
	CPU                 int               `json:"cpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var in createBody
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.createOK == 0 {
		apiError(w, http.StatusInternalServerError, "fake: create failed (FailCreateAfter)")
		return
	}
	if s.createOK > 0 {
		s.createOK--
	}
	sb := Sandbox{Name: in.Name, Snapshot: in.Snapshot, Target: in.Target, Labels: in.Labels, CPU: in.CPU,
		Memory: in.Memory, Disk: in.Disk, AutoStopInterval: 15, AutoArchiveInterval: 10080, AutoDeleteInterval: -1}
	for _, v := range []struct {
		src *int
		dst *int
	}{{in.AutoStopInterval, &sb.AutoStopInterval}, {in.AutoArchiveInterval, &sb.AutoArchiveInterval}, {in.AutoDeleteInterval, &sb.AutoDeleteInterval}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	if sb.Target == "" {
		sb.Target = "us"
	}
	b, err := s.newBox(sb)
	if err != nil {
		if err.Error() == "conflict" {
			apiError(w, http.StatusConflict, "Sandbox with name "+in.Name+" already exists")
			return
		}
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if s.loseCreates > 0 {
		s.loseCreates--
		apiError(w, http.StatusInternalServerError, "fake: create response lost (LoseCreateResponses)")
		return
	}
	writeJSON(w, b.sb)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			apiError(w, http.StatusBadRequest, "labels: "+err.Error())
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Sandbox{}
next:
	for _, b := range s.boxes {
		for k, v := range want {
			if b.sb.Labels[k] != v {
				continue next
			}
		}
		out = append(out, b.sb)
	}
	writeJSON(w, out)
}

// withBox runs fn on the sandbox named in the path, under mu; 404 if none.
func (s *Server) withBox(w http.ResponseWriter, r *http.Request, fn func(b *box)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.find(r.PathValue("id"))
	if b == nil {
		apiError(w, http.StatusNotFound, "Sandbox with ID or name "+r.PathValue("id")+" not found")
		return
	}
	fn(b)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	var stop []*proc
	s.withBox(w, r, func(b *box) {
		if b.armedOnRead {
			b.sb.State, b.armedOnRead, b.onRead = b.onRead, false, ""
			if b.sb.State != StateStarted {
				stop, b.procs = b.procs, nil
			}
		}
		writeJSON(w, b.sb)
	})
	for _, p := range stop {
		p.kill()
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	var victim *box
	s.withBox(w, r, func(b *box) {
		delete(s.boxes, b.sb.ID)
		victim = b
		writeJSON(w, map[string]any{})
	})
	if victim != nil {
		for _, p := range victim.procs {
			p.kill()
		}
		_ = os.RemoveAll(filepath.Dir(filepath.Dir(victim.dir)))
	}
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	s.withBox(w, r, func(b *box) {
		switch b.sb.State {
		case StateStopped, StateArchived, StateStarted:
			b.sb.State = StateStarted
			writeJSON(w, b.sb)
		default:
			apiError(w, http.StatusBadRequest, "Sandbox is "+b.sb.State)
		}
	})
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var procs []*proc
	s.withBox(w, r, func(b *box) {
		if b.sb.State != StateStarted {
			// Daytona refuses to stop a sandbox that is not started
			// (archived ones included).
			apiError(w, http.StatusBadRequest, "Sandbox is not started (state "+b.sb.State+")")
			return
		}
		procs, b.procs = b.procs, nil
		b.sb.State = StateStopped
		b.sessions = map[string]bool{}
		writeJSON(w, b.sb)
	})
	for _, p := range procs {
		p.stop()
	}
}

func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	s.withBox(w, r, func(b *box) {
		if b.sb.State != StateStopped && b.sb.State != StateArchived {
			apiError(w, http.StatusBadRequest, "Sandbox must be stopped to be archived")
			return
		}
		b.sb.State = StateArchived
		writeJSON(w, b.sb)
	})
}

func (s *Server) autoDelete(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil || n < -1 {
		apiError(w, http.StatusBadRequest, "invalid interval")
		return
	}
	s.withBox(w, r, func(b *box) {
		if !s.ignoreAutoDelete {
			b.sb.AutoDeleteInterval = n
		}
		if b.onRead != "" {
			b.armedOnRead = true
		}
		writeJSON(w, b.sb)
	})
}

func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		apiError(w, http.StatusBadRequest, "invalid port")
		return
	}
	s.withBox(w, r, func(b *box) {
		writeJSON(w, map[string]any{
			"sandboxId": b.sb.ID,
			"url":       fmt.Sprintf("https://%d-%s.proxy.fake-daytona.invalid", port, b.sb.ID),
			"token":     "preview-" + strings.Repeat(b.sb.ID[:4], 2),
		})
	})
}

func randomID() string {
	raw := make([]byte, 8)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}
