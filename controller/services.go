package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// Headers of the service logs API.
const (
	// HeaderLogOffset is the offset of the first log byte of the response.
	HeaderLogOffset = "X-Tether-Log-Offset"
	// HeaderLogEnd is an HTTP trailer: the offset one past the last byte sent, where a reader
	// resumes. A response cut off without it was interrupted; resume from the bytes received.
	HeaderLogEnd = "X-Tether-Log-End"
	// HeaderLogOverrun is an HTTP trailer, "true" when the response ended early because the
	// bytes after the end offset were overwritten in the runner's ring before they were sent:
	// ask again from the end offset, and the next response's start offset says where the log
	// resumes.
	HeaderLogOverrun = "X-Tether-Log-Overrun"
)

// serviceRecord turns what the runner reports into the controller's record of it.
func serviceRecord(workspaceID string, st protocol.ServiceStatus, now time.Time) api.Service {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return api.Service{WorkspaceID: workspaceID, Name: st.Name, State: st.State, Reason: st.Reason, Port: st.Port,
		Restarts: st.Restarts, PID: st.PID, StderrTail: st.StderrTail, LogEnd: st.LogEnd, Argv: st.Spec.Argv,
		StartedAt: at(st.StartedAt), ReadyAt: at(st.ReadyAt), StoppedAt: at(st.StoppedAt), UpdatedAt: now}
}

// serviceLive says whether a service in state is running or about to (its preview links hold).
func serviceLive(state string) bool {
	return state == protocol.ServiceStarting || state == protocol.ServiceReady || state == protocol.ServiceStopping
}

// recordService stores a service's status; a failure is logged, not reported: the runner's
// answer is the truth of the moment.
func (s *Server) recordService(ctx context.Context, v api.Service) {
	if err := s.store.PutService(context.WithoutCancel(ctx), v); err != nil {
		s.log.Error("record service", "workspace", v.WorkspaceID, "service", v.Name, "err", err)
	}
}

// recordServices stores the statuses a runner reports (in its hello or a list). With all, the
// stored services that are still live on record but not reported are marked failed: the runner
// no longer knows them.
func (s *Server) recordServices(ctx context.Context, workspaceID string, reported []protocol.ServiceStatus, all bool) []api.Service {
	out, _ := s.reconcileServices(ctx, workspaceID, reported, all)
	return out
}

// reconcileServices is recordServices that also says which reports were refused (a port the
// service was not given), by service name.
func (s *Server) reconcileServices(ctx context.Context, workspaceID string, reported []protocol.ServiceStatus, all bool) ([]api.Service, map[string]error) {
	out := make([]api.Service, 0, len(reported))
	refused := map[string]error{}
	stored, err := s.store.ListServices(ctx, workspaceID)
	if err != nil {
		// Without the records no report can be held to its allotted port: none is recorded.
		s.log.Error("list services", "workspace", workspaceID, "err", err)
		return nil, refused
	}
	byName := make(map[string]api.Service, len(stored))
	for _, v := range stored {
		byName[v.Name] = v
	}
	seen := map[string]bool{}
	for _, st := range reported {
		v := serviceRecord(workspaceID, st, s.now())
		prev, known := byName[st.Name]
		if err := holdToAllotted(&v, prev, known); err != nil {
			s.log.Warn("runner reported a service port it was not given", "workspace", workspaceID, "service", st.Name, "err", err)
			refused[st.Name] = err
		}
		s.recordService(ctx, v)
		if known && serviceLive(prev.State) && !serviceLive(v.State) {
			s.revokeOnStop(ctx, workspaceID, v.Name)
		}
		out = append(out, v)
		seen[st.Name] = true
	}
	if !all {
		return out, refused
	}
	for _, v := range stored {
		if seen[v.Name] {
			continue
		}
		if serviceLive(v.State) {
			v.State, v.Reason, v.UpdatedAt = protocol.ServiceFailed, "the runner no longer reports this service", s.now()
			s.recordService(ctx, v)
			s.revokeOnStop(ctx, workspaceID, v.Name)
		}
		out = append(out, v)
	}
	return out, refused
}

func (s *Server) handleServiceStart(w http.ResponseWriter, r *http.Request) {
	ws, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var spec protocol.ServiceSpec
	if err := decodeJSON(r, &spec); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case spec.Name == "":
		err = protocol.Errorf(protocol.CodeInvalidArgument, "a service needs a name")
	case len(spec.Argv) == 0:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "service %s needs a command", spec.Name)
	case spec.Port < 0 || spec.Port > 65535:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "port %d is out of range 0-65535 (0: auto)", spec.Port)
	}
	if err == nil {
		err = s.bindRun(r.Context(), ws, &spec)
	}
	if err == nil {
		err = s.startPort(r.Context(), ws.ID, &spec)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var st protocol.ServiceStatus
	if err := c.Call(r.Context(), protocol.OpServiceStart, epoch, spec, &st); err != nil {
		// The failed status (reason, stderr tail, restarts) is what the runner lists now.
		s.refreshService(r.Context(), ws.ID, c, spec.Name)
		writeError(w, err)
		return
	}
	v := serviceRecord(ws.ID, st, s.now())
	if err := holdToAllotted(&v, api.Service{Port: spec.Port}, true); err != nil {
		s.recordService(r.Context(), v)
		// Whatever the runner started is not this controller's service: it goes.
		var stopped protocol.ServiceStatus
		_ = c.Call(r.Context(), protocol.OpServiceStop, epoch, protocol.ServiceStopArgs{Name: spec.Name}, &stopped)
		writeError(w, err)
		return
	}
	s.recordService(r.Context(), v)
	writeJSON(w, http.StatusCreated, v)
}

// bindRun settles which run an on-run-finish service belongs to: the one named (which must be
// this workspace's and still running) or else the newest running run. A run named with no stop
// policy means on-run-finish.
func (s *Server) bindRun(ctx context.Context, ws api.Workspace, spec *protocol.ServiceSpec) error {
	if spec.Run != "" && spec.StopPolicy == "" {
		spec.StopPolicy = "on-run-finish"
	}
	if spec.StopPolicy != "on-run-finish" {
		if spec.Run != "" {
			return protocol.Errorf(protocol.CodeInvalidArgument, "a run only goes with stop policy on-run-finish, not %s", spec.StopPolicy)
		}
		return nil
	}
	running, err := s.store.RunningRuns(ctx, ws.AllocationID)
	if err != nil {
		return err
	}
	if spec.Run == "" {
		var newest time.Time
		for _, run := range running {
			if spec.Run == "" || run.StartedAt.After(newest) {
				spec.Run, newest = run.ID, run.StartedAt
			}
		}
		if spec.Run == "" {
			return protocol.Errorf(protocol.CodeConflict, "stop policy on-run-finish: workspace %s has no running run (start one, or name it with --run)", ws.Name)
		}
		return nil
	}
	for _, run := range running {
		if run.ID == spec.Run {
			return nil
		}
	}
	if run, err := s.store.GetRun(ctx, spec.Run); err == nil && run.WorkspaceID == ws.ID {
		return protocol.Errorf(protocol.CodeConflict, "run %s is %s, not running", spec.Run, run.State)
	}
	return protocol.Errorf(protocol.CodeNotFound, "workspace %s has no run %s", ws.Name, spec.Run)
}

// refreshService records one service as the runner lists it now (best effort).
func (s *Server) refreshService(ctx context.Context, workspaceID string, c *hub.Conn, name string) {
	var list []protocol.ServiceStatus
	if err := c.Call(ctx, protocol.OpServiceList, 0, struct{}{}, &list); err != nil {
		return
	}
	for _, st := range list {
		if st.Name == name {
			s.recordServices(ctx, workspaceID, []protocol.ServiceStatus{st}, false)
		}
	}
}

// services lists a workspace's services: live from its runner when connected (and recorded),
// else as last recorded.
func (s *Server) services(ctx context.Context, idOrName string) ([]api.Service, error) {
	list, _, err := s.servicesChecked(ctx, idOrName)
	return list, err
}

// servicesChecked is services that also says which of the runner's reports were refused.
func (s *Server) servicesChecked(ctx context.Context, idOrName string) ([]api.Service, map[string]error, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return nil, nil, err
	}
	c, ok := s.runnerOf(ctx, ws.AllocationID)
	if !ok || ws.State != api.StateReady {
		list, err := s.store.ListServices(ctx, ws.ID)
		return list, nil, err
	}
	var list []protocol.ServiceStatus
	if err := c.Call(ctx, protocol.OpServiceList, 0, struct{}{}, &list); err != nil {
		return nil, nil, err
	}
	out, refused := s.reconcileServices(ctx, ws.ID, list, true)
	return out, refused, nil
}

func (s *Server) handleServiceList(w http.ResponseWriter, r *http.Request) {
	list, err := s.services(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// handleServiceLogs streams a service's log bytes from ?offset=N (with ?follow=true, until the
// service stops or the client goes). The start offset is a header, the end offset a trailer; a
// runner that drops mid-stream cuts the response off, without the trailer.
func (s *Server) handleServiceLogs(w http.ResponseWriter, r *http.Request) {
	c, err := s.runnerFor(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	args := protocol.ServiceLogsArgs{Name: r.PathValue("name"), Follow: q.Get("follow") == "true"}
	if o := q.Get("offset"); o != "" {
		if args.Offset, err = strconv.ParseInt(o, 10, 64); err != nil || args.Offset < 0 {
			writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "offset %q: want a byte offset", o))
			return
		}
	}
	st, err := c.Open(protocol.OpServiceLogs, "", 0, args)
	if err != nil {
		writeError(w, err)
		return
	}
	defer st.Close()
	stop := context.AfterFunc(r.Context(), func() { st.Close() })
	defer stop()
	_ = st.SetReadDeadline(time.Now().Add(hub.TrailerWait))
	tr, err := hub.ReadTrailer(st)
	if err != nil {
		writeError(w, err)
		return
	}
	var reply protocol.ServiceLogsReply
	if err := hub.DecodeResult(tr, &reply); err != nil {
		writeError(w, err)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(HeaderLogOffset, strconv.FormatInt(reply.Offset, 10))
	h.Set("Trailer", HeaderLogEnd+", "+HeaderLogOverrun)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	offset := reply.Offset
	buf := make([]byte, 64<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			if r.Context().Err() == nil {
				s.log.Warn("service log stream cut off", "service", args.Name, "offset", offset, "err", err)
			}
			panic(http.ErrAbortHandler)
		}
		switch ch {
		case protocol.ChanStdout:
			if _, err := w.Write(p); err != nil {
				panic(http.ErrAbortHandler)
			}
			offset += int64(len(p))
			if flusher != nil {
				flusher.Flush()
			}
		case protocol.ChanExit:
			var end protocol.ServiceLogsEnd
			if err := json.Unmarshal(p, &end); err == nil {
				offset = end.Offset
			}
			h.Set(HeaderLogEnd, strconv.FormatInt(offset, 10))
			if end.Overrun {
				h.Set(HeaderLogOverrun, "true")
			}
			return
		}
	}
}

// handleServiceEndpoint answers where a ready service is reached: through the controller's
// proxy (the runner dials it inside the sandbox), and the provider's own address of its port
// when it has one. Nothing is sent into the service: its readiness check is its own.
func (s *Server) handleServiceEndpoint(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	// A local sandbox's direct address is on its host's loopback: answered there.
	if s.forwardToPlacement(w, r, ws) {
		return
	}
	name := r.PathValue("name")
	list, refused, err := s.servicesChecked(r.Context(), ws.ID)
	if err == nil && refused[name] != nil {
		err = refused[name]
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var v api.Service
	for _, x := range list {
		if x.Name == name {
			v = x
		}
	}
	if v.Name == "" {
		writeError(w, protocol.Errorf(protocol.CodeNotFound, "workspace %s has no service %q", ws.Name, name))
		return
	}
	if v.State != protocol.ServiceReady || v.Port == 0 {
		writeError(w, protocol.Errorf(protocol.CodeUnavailable, "service %s is %s%s; no endpoint", v.Name, v.State, withPort(v.Port)))
		return
	}
	ep := api.ServiceEndpoint{
		URL:     strings.TrimSuffix(s.advertise, "/") + servicePath(ws.ID, v.Name) + "/proxy/",
		Headers: map[string]string{"Authorization": "Bearer <operator or API token>"},
		Port:    v.Port,
		Hint:    "send the operator token (or an API token) as Authorization: Bearer; for a browser, make a preview link: tether service url",
	}
	// The provider's own address is a convenience: one it cannot give (or that is the
	// controller's own) is left out, not an error.
	if prov, err := s.providerFor(r.Context(), ws.Provider); err == nil {
		if d, err := prov.Endpoint(r.Context(), ws.AllocationID, v.Port); err == nil && s.ownAddress(d.URL) == nil {
			ep.DirectURL, ep.DirectHeaders = d.URL, d.Headers
		}
	}
	writeJSON(w, http.StatusOK, ep)
}

// servicePath is the API path of a workspace's service.
func servicePath(workspaceID, name string) string {
	return "/v1/workspaces/" + url.PathEscape(workspaceID) + "/services/" + url.PathEscape(name)
}

func withPort(port int) string {
	if port == 0 {
		return ""
	}
	return " on port " + strconv.Itoa(port)
}

func (s *Server) handleServiceStop(w http.ResponseWriter, r *http.Request) {
	ws, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	args := protocol.ServiceStopArgs{Name: r.PathValue("name")}
	if g := r.URL.Query().Get("grace"); g != "" {
		d, err := parseDuration("grace", g, 0)
		if err != nil {
			writeError(w, err)
			return
		}
		args.Grace = protocol.Duration(d)
	}
	var st protocol.ServiceStatus
	if err := c.Call(r.Context(), protocol.OpServiceStop, epoch, args, &st); err != nil {
		s.refreshService(r.Context(), ws.ID, c, args.Name)
		writeError(w, err)
		return
	}
	v := serviceRecord(ws.ID, st, s.now())
	s.recordService(r.Context(), v)
	s.revokeOnStop(r.Context(), ws.ID, args.Name)
	writeJSON(w, http.StatusOK, v)
}
