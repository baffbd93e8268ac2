package project

import (
	"context"
	"path/filepath"
	"strings"
	"sync"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/protocol"
)

// Store is what projects need of the state store.
type Store interface {
	// CreateProject records a project (CodeExists when its name is taken).
	CreateProject(ctx context.Context, p api.Project) error
	// GetProject finds a project by id or name.
	GetProject(ctx context.Context, idOrName string) (api.Project, error)
	// ProjectWorkspaces lists a project's workspaces (not deleted ones), oldest first.
	ProjectWorkspaces(ctx context.Context, projectID string) ([]api.Workspace, error)
	// OpenWorkspaceFor finds the project's newest workspace on branch that is not deleted or
	// failed (ok false when there is none).
	OpenWorkspaceFor(ctx context.Context, projectID, branch string) (w api.Workspace, ok bool, err error)
}

// Config is what Projects works with.
type Config struct {
	Store   Store
	DataDir string // base clones live in DATA/projects/<id>/base.git
	// GitBinary is the git run on base clones (default "git" on PATH).
	GitBinary string
	// NewID, CheckName and ExpectKind are the controller's rules for ids and names.
	NewID      func(prefix string) string
	CheckName  func(kind, name, id string) error
	ExpectKind func(value, want string) error
	// Clock stamps records (the real clock when nil).
	Clock clockwork.Clock
	// Go starts background work as a named routine of the owner (a checkout's pack writer),
	// reporting false once the owner is shutting down. Nil: plain goroutines.
	Go func(name string, fn func(ctx context.Context)) bool
}

// Projects keeps the controller's projects and their base clones.
type Projects struct {
	cfg   Config
	store Store
	locks projectLocks
}

// New returns the projects of cfg.Store, with base clones under cfg.DataDir.
func New(cfg Config) *Projects {
	if cfg.GitBinary == "" {
		cfg.GitBinary = "git"
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Projects{cfg: cfg, store: cfg.Store}
}

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

func (s *Projects) gitBinary() string { return s.cfg.GitBinary }

func (s *Projects) baseClonePath(projectID string) string {
	return filepath.Join(s.cfg.DataDir, "projects", projectID, "base.git")
}

// baseRepo opens the project's base clone, cloning it again if a sweep removed it. The caller
// holds the project's lock.
func (s *Projects) baseRepo(ctx context.Context, p api.Project) (*gitsource.Repo, error) {
	return gitsource.Ensure(ctx, s.gitBinary(), p.Source, s.baseClonePath(p.ID))
}

// FetchBase brings the base clone's base ref up to the source's and returns its commit.
func (s *Projects) FetchBase(ctx context.Context, p api.Project) (*gitsource.Repo, string, error) {
	unlock := s.locks.lock(p.ID)
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

// Create records a project once its source was cloned into the managed base clone and
// its base ref found there: a project that cannot be checked out is never recorded.
func (s *Projects) Create(ctx context.Context, req api.CreateProjectRequest) (api.Project, error) {
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
	id := s.cfg.NewID("prj_")
	if req.Name == "" {
		req.Name = strings.TrimSuffix(filepath.Base(strings.TrimRight(src, "/")), ".git")
	}
	if err := s.cfg.CheckName("project", req.Name, id); err != nil {
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
		Provision: req.Provision, Teardown: req.Teardown, CreatedAt: s.cfg.Clock.Now().UTC()}
	unlock := s.locks.lock(id)
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

// Get finds a project by id or name.
func (s *Projects) Get(ctx context.Context, idOrName string) (api.Project, error) {
	if err := s.cfg.ExpectKind(idOrName, "prj_"); err != nil {
		return api.Project{}, err
	}
	return s.store.GetProject(ctx, idOrName)
}
