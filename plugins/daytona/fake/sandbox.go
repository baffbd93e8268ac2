// FAKE — not Daytona. The sandbox half of the in-repo stand-in for the
// Daytona REST API: create, read, list, lifecycle.

package fake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// box is one fake sandbox.
type box struct {
	sb  Sandbox
	dir string // the real directory backing the sandbox (its user's home)
	// to is the state a transition in progress ends in ("" when none), after
	// left more requests about the sandbox.
	to   string
	left int
	// sessions are the toolbox's process sessions and what they run.
	sessions map[string]*session
	// execs are the processes process/execute is running.
	execs []*proc
	// listHidden: list requests the sandbox is still missing from.
	listHidden int
	// onRead sets the state on the read after the next auto-delete update.
	onRead      string
	armedOnRead bool
}

type session struct {
	procs    []*proc
	commands []string
}

// takeProcs removes and returns every process of the sandbox.
func (b *box) takeProcs() []*proc {
	var out []*proc
	for _, se := range b.sessions {
		out = append(out, se.procs...)
	}
	out = append(out, b.execs...)
	b.sessions, b.execs = map[string]*session{}, nil
	return out
}

// step moves a transition in progress one request on; mu held.
func (b *box) step() {
	if b.to == "" {
		return
	}
	if b.left--; b.left <= 0 {
		b.sb.State, b.to = b.to, ""
	}
}

// move starts a transition: the sandbox is via now, to after n requests.
func (b *box) move(via, to string, n int) {
	if n <= 0 {
		b.sb.State, b.to = to, ""
		return
	}
	b.sb.State, b.to, b.left = via, to, n
}

func (s *Server) apiRoutes() http.Handler {
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
	mux.HandleFunc("GET /sandbox/{id}/toolbox-proxy-url", s.toolboxProxyURL)
	return mux
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

// Plant makes a started sandbox directly, as another tool would (labels as
// given), and returns its id.
func (s *Server) Plant(name string, labels map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.newBox(Sandbox{Name: name, Labels: labels})
	if err != nil {
		panic(err)
	}
	b.sb.State = StateStarted
	return b.sb.ID
}

// newBox makes a sandbox with a real directory; mu held.
func (s *Server) newBox(sb Sandbox) (*box, error) {
	if sb.Name != "" && s.find(sb.Name) != nil {
		return nil, errConflict
	}
	sb.ID = randomID()
	if sb.Name == "" {
		sb.Name = sb.ID
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	sb.OrganizationID, sb.User, sb.Env = "fake-org", "daytona", map[string]string{}
	sb.ToolboxProxyURL = s.ToolboxProxyURL()
	dir := filepath.Join(s.dir, sb.ID, "home", "daytona")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b := &box{sb: sb, dir: dir, sessions: map[string]*session{}, listHidden: s.listLag}
	s.boxes[sb.ID] = b
	return b, nil
}

var errConflict = fmt.Errorf("conflict")

// createBody is the documented CreateSandbox body (the fields the fake reads).
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
	BuildInfo           *struct {
		DockerfileContent string `json:"dockerfileContent"`
	} `json:"buildInfo"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var in createBody
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Resources come from the snapshot; only an image (buildInfo) takes them.
	if (in.CPU != 0 || in.Memory != 0 || in.Disk != 0) && in.BuildInfo == nil {
		apiError(w, http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot")
		return
	}
	if in.BuildInfo != nil && (in.Snapshot != "" || in.BuildInfo.DockerfileContent == "") {
		apiError(w, http.StatusBadRequest, "Specify either a snapshot or build info with a Dockerfile")
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
	sb := Sandbox{Name: in.Name, Snapshot: in.Snapshot, Target: in.Target, Labels: in.Labels, CPU: 1, Memory: 1, Disk: 3,
		AutoStopInterval: 15, AutoArchiveInterval: 10080, AutoDeleteInterval: -1}
	if in.BuildInfo != nil {
		sb.CPU, sb.Memory, sb.Disk = max(in.CPU, 1), max(in.Memory, 1), max(in.Disk, 3)
		now := time.Now().UTC().Format(time.RFC3339)
		sb.BuildInfo = &BuildInfo{DockerfileContent: in.BuildInfo.DockerfileContent, SnapshotRef: "fake-build-" + randomID(), CreatedAt: now, UpdatedAt: now}
	} else if sb.Snapshot == "" {
		sb.Snapshot = "daytonaio/sandbox:fake-default"
	}
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
	if err == errConflict {
		apiError(w, http.StatusConflict, "Sandbox with name "+in.Name+" already exists")
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	via := StateCreating
	if in.BuildInfo != nil {
		via = StatePendingBuild
	}
	b.move(via, StateStarted, s.steps)
	if s.loseCreates > 0 {
		s.loseCreates--
		apiError(w, s.loseStatus, "fake: create answered after the sandbox was made (FailCreatesAfterMaking)")
		return
	}
	writeJSON(w, http.StatusOK, b.sb)
}

// list is GET /sandbox: {items, nextCursor}, filtered by labels, limit
// per page (default 100, at most 200), eventually consistent (ListLag).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want := map[string]string{}
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			apiError(w, http.StatusBadRequest, "labels: "+err.Error())
			return
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			apiError(w, http.StatusBadRequest, "limit must be a number from 1 to 200")
			return
		}
		limit = n
	}
	from := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "after:"))
		if err != nil || n < 0 || !strings.HasPrefix(c, "after:") {
			apiError(w, http.StatusBadRequest, "invalid cursor")
			return
		}
		from = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []Sandbox
next:
	for _, b := range s.boxes {
		if b.listHidden > 0 {
			b.listHidden--
			continue
		}
		for k, v := range want {
			if b.sb.Labels[k] != v {
				continue next
			}
		}
		all = append(all, b.sb)
	}
	slices.SortFunc(all, func(a, b Sandbox) int { return strings.Compare(a.ID, b.ID) })
	page := all[min(from, len(all)):min(from+limit, len(all))]
	var cursor *string
	if from+limit < len(all) {
		c := "after:" + strconv.Itoa(from+limit)
		cursor = &c
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": append([]Sandbox{}, page...), "nextCursor": cursor})
}

// withBox runs fn on the sandbox named in the path, under mu, after
// moving its transition on; 404 if none.
func (s *Server) withBox(w http.ResponseWriter, r *http.Request, fn func(b *box)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.find(r.PathValue("id"))
	if b == nil {
		apiError(w, http.StatusNotFound, "Sandbox with ID or name "+r.PathValue("id")+" not found")
		return
	}
	b.step()
	fn(b)
}

// busy answers 409 while a state change is in progress, as Daytona does.
func busy(w http.ResponseWriter, b *box) bool {
	if b.to == "" {
		return false
	}
	apiError(w, http.StatusConflict, "Sandbox state change in progress")
	return true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	var kill []*proc
	s.withBox(w, r, func(b *box) {
		if b.armedOnRead {
			b.sb.State, b.to, b.armedOnRead, b.onRead = b.onRead, "", false, ""
			if b.sb.State != StateStarted {
				kill = b.takeProcs()
			}
		}
		writeJSON(w, http.StatusOK, b.sb)
	})
	for _, p := range kill {
		p.kill()
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	var victim *box
	var kill []*proc
	s.withBox(w, r, func(b *box) {
		if busy(w, b) {
			return
		}
		delete(s.boxes, b.sb.ID)
		victim, kill = b, b.takeProcs()
		b.sb.State = StateDestroyed
		writeJSON(w, http.StatusOK, b.sb)
	})
	for _, p := range kill {
		p.kill()
	}
	if victim != nil {
		_ = os.RemoveAll(filepath.Dir(filepath.Dir(victim.dir)))
	}
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	s.withBox(w, r, func(b *box) {
		if busy(w, b) {
			return
		}
		switch b.sb.State {
		case StateStopped:
			b.move(StateStarting, StateStarted, s.steps)
		case StateArchived:
			b.move(StateRestoring, StateStarted, s.restoreSteps)
		case StateStarted:
		default:
			apiError(w, http.StatusBadRequest, "Sandbox is "+b.sb.State)
			return
		}
		writeJSON(w, http.StatusOK, b.sb)
	})
}

// stop kills every process in the sandbox at once (SIGKILL; Daytona
// spares only its daemon), then the sandbox goes stopping → stopped.
func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var kill []*proc
	s.withBox(w, r, func(b *box) {
		if busy(w, b) {
			return
		}
		if b.sb.State != StateStarted {
			// Daytona refuses to stop a sandbox that is not started
			// (archived ones included).
			apiError(w, http.StatusBadRequest, "Sandbox is not started (state "+b.sb.State+")")
			return
		}
		kill = b.takeProcs()
		b.move(StateStopping, StateStopped, s.steps)
		writeJSON(w, http.StatusOK, b.sb)
	})
	for _, p := range kill {
		p.kill()
	}
}

func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	s.withBox(w, r, func(b *box) {
		if busy(w, b) {
			return
		}
		switch b.sb.State {
		case StateStopped:
			b.move(StateArchiving, StateArchived, s.steps)
		case StateArchived:
		default:
			apiError(w, http.StatusBadRequest, "Sandbox must be stopped to be archived")
			return
		}
		writeJSON(w, http.StatusOK, b.sb)
	})
}

func (s *Server) autoDelete(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil {
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
		writeJSON(w, http.StatusOK, b.sb)
	})
}

func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		apiError(w, http.StatusBadRequest, "invalid port")
		return
	}
	s.withBox(w, r, func(b *box) {
		writeJSON(w, http.StatusOK, map[string]any{
			"sandboxId": b.sb.ID,
			"url":       fmt.Sprintf("https://%d-%s.proxy.fake-daytona.invalid", port, b.sb.ID),
			"token":     "preview-" + strings.Repeat(b.sb.ID[:4], 2),
		})
	})
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	s.withBox(w, r, func(b *box) { writeJSON(w, http.StatusOK, map[string]string{"url": b.sb.ToolboxProxyURL}) })
}
