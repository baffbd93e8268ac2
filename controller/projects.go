package controller

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/protocol"
)

// projectLocks serializes what touches one project's base clone or picks its shared workspace:
// clone, fetch, pack, and the find-or-create of a shared branch's workspace.
type projectLocks struct{ m sync.Map }

func (l *projectLocks) lock(id string) func() {
	v, _ := l.m.LoadOrStore(id, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// checkBranch takes a branch as a short name (refs/heads/ stripped) and applies git's ref-name
// rules, so a bad name is refused before anything is allocated.
func checkBranch(b *string) error {
	*b = strings.TrimPrefix(*b, "refs/heads/")
	return gitsource.CheckBranch(*b)
}

func (s *Server) gitBinary() string { return firstNonEmpty(s.cfg.GitBinary, "git") }

func (s *Server) baseClonePath(projectID string) string {
	return filepath.Join(s.cfg.DataDir, "projects", projectID, "base.git")
}

// baseRepo opens the project's base clone, cloning it again if a sweep removed it. The caller
// holds the project's lock.
func (s *Server) baseRepo(ctx context.Context, p api.Project) (*gitsource.Repo, error) {
	return gitsource.Ensure(ctx, s.gitBinary(), p.Source, s.baseClonePath(p.ID))
}

// fetchBase brings the base clone's base ref up to the source's and returns its commit.
func (s *Server) fetchBase(ctx context.Context, p api.Project) (*gitsource.Repo, string, error) {
	unlock := s.projectLocks.lock(p.ID)
	defer unlock()
	repo, err := s.baseRepo(ctx, p)
	if err != nil {
		return nil, "", err
	}
	commit, err := repo.Fetch(ctx, p.BaseRef)
	return repo, commit, err
}

// normalizeSource checks a source: a URL (scheme://… or host:path) as given, or an absolute
// path on the controller's host. A relative path is refused: relative to what the controller's
// working directory happens to be is never what the caller meant (the CLI makes paths absolute).
func normalizeSource(src string) (string, error) {
	if src == "" {
		return "", protocol.Errorf(protocol.CodeInvalidArgument, "a project needs --source: a repository path or URL")
	}
	if strings.HasPrefix(src, "-") {
		return "", protocol.Errorf(protocol.CodeInvalidArgument, "source %q may not start with '-'", src)
	}
	if !gitsource.IsLocal(src) || strings.HasPrefix(src, "file://") {
		return src, nil
	}
	if !filepath.IsAbs(src) {
		return "", protocol.Errorf(protocol.CodeInvalidArgument, "source %q: a local path must be absolute", src)
	}
	return filepath.Clean(src), nil
}

func validMode(m string) bool {
	return m == api.ModeIsolated || m == api.ModeShared || m == api.ModeOperatorBranch
}

func (s *Server) handleCreateProject(w http.ResponseWriter, r *http.Request) {
	var req api.CreateProjectRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.CreateProject(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

// CreateProject records a project once its source was cloned into the managed base clone and
// its base ref found there: a project that cannot be checked out is never recorded.
func (s *Server) CreateProject(ctx context.Context, req api.CreateProjectRequest) (api.Project, error) {
	src, err := normalizeSource(req.Source)
	if err != nil {
		return api.Project{}, err
	}
	if req.Mode == "" {
		req.Mode = api.ModeIsolated
	}
	if !validMode(req.Mode) {
		return api.Project{}, protocol.Errorf(protocol.CodeInvalidArgument, "mode %q: want isolated, shared or operator-branch", req.Mode)
	}
	id := newID("prj_")
	if req.Name == "" {
		req.Name = strings.TrimSuffix(filepath.Base(strings.TrimRight(src, "/")), ".git")
	}
	if err := checkName("project", req.Name, id); err != nil {
		return api.Project{}, err
	}
	for _, c := range append(append([]string{}, req.Provision...), req.Teardown...) {
		if strings.TrimSpace(c) == "" {
			return api.Project{}, protocol.Errorf(protocol.CodeInvalidArgument, "an empty provision or teardown command")
		}
	}
	if _, err := s.store.GetProject(ctx, req.Name); err == nil {
		return api.Project{}, protocol.Errorf(protocol.CodeExists, "a project named %q exists", req.Name)
	}
	if req.BaseRef != "" {
		if err := checkBranch(&req.BaseRef); err != nil {
			return api.Project{}, err
		}
	}
	p := api.Project{ID: id, Name: req.Name, Source: src, BaseRef: req.BaseRef, Mode: req.Mode,
		Provision: req.Provision, Teardown: req.Teardown, CreatedAt: time.Now().UTC()}
	unlock := s.projectLocks.lock(id)
	defer unlock()
	repo, err := s.baseRepo(ctx, p)
	if err != nil {
		return api.Project{}, err
	}
	fail := func(err error) (api.Project, error) {
		_ = gitsource.Remove(filepath.Dir(repo.Dir))
		return api.Project{}, err
	}
	if p.BaseRef == "" {
		if p.BaseRef, err = repo.DefaultBranch(ctx); err != nil {
			return fail(err)
		}
	}
	if err := checkBranch(&p.BaseRef); err != nil {
		return fail(err)
	}
	if _, err := repo.Fetch(ctx, p.BaseRef); err != nil {
		return fail(err)
	}
	if err := s.store.CreateProject(ctx, p); err != nil {
		return fail(err)
	}
	return p, nil
}

func (s *Server) project(ctx context.Context, idOrName string) (api.Project, error) {
	if err := expectKind(idOrName, "prj_"); err != nil {
		return api.Project{}, err
	}
	return s.store.GetProject(ctx, idOrName)
}

func (s *Server) handleListProjects(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListProjects(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleGetProject(w http.ResponseWriter, r *http.Request) {
	p, err := s.project(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
