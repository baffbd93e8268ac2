package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func sameProject(t *testing.T, got, want api.Project) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Source != want.Source || got.BaseRef != want.BaseRef ||
		got.Mode != want.Mode || !slices.Equal(got.Provision, want.Provision) || !slices.Equal(got.Teardown, want.Teardown) ||
		got.CreatedAt.Location() != time.UTC || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("project = %+v\nwant      %+v", got, want)
	}
}

func projectIDs(ps []api.Project) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func testProjects(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListProjects(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty store lists %#v, %v", list, err)
	}
	web := api.Project{ID: "prj_web", Name: "web", Source: "/src/web", BaseRef: "main", Mode: api.ModeIsolated,
		Provision: []string{"npm ci", "echo 'ready' > /tmp/x"}, Teardown: []string{"npm run stop"}, CreatedAt: base.Add(time.Second)}
	api2 := api.Project{ID: "prj_api", Name: "api", Source: "https://example.com/api.git", BaseRef: "trunk",
		Mode: api.ModeShared, CreatedAt: base}
	for _, p := range []api.Project{web, api2} {
		if err := s.CreateProject(ctx, p); err != nil {
			t.Fatalf("CreateProject(%s): %v", p.Name, err)
		}
	}
	for _, key := range []string{web.ID, web.Name} {
		got, err := s.GetProject(ctx, key)
		if err != nil {
			t.Fatalf("GetProject(%s): %v", key, err)
		}
		sameProject(t, got, web)
	}
	got, err := s.GetProject(ctx, api2.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameProject(t, got, api2) // no commands: none come back
	list, err := s.ListProjects(ctx)
	if err != nil || !slices.Equal(projectIDs(list), []string{api2.ID, web.ID}) {
		t.Fatalf("ListProjects = %v, %v; want oldest first [%s %s]", projectIDs(list), err, api2.ID, web.ID)
	}
	sameProject(t, list[1], web)

	// A taken name is refused, and nothing of the refused project is recorded.
	dup := api.Project{ID: "prj_dup", Name: "web", Source: "/elsewhere", BaseRef: "main", Mode: api.ModeShared, CreatedAt: base}
	wantCode(t, "second project named web", s.CreateProject(ctx, dup), protocol.CodeExists)
	_, err = s.GetProject(ctx, dup.ID)
	wantCode(t, "refused project", err, protocol.CodeNotFound)
	if got, _ := s.GetProject(ctx, "web"); got.ID != web.ID || got.Source != web.Source {
		t.Fatalf("web after the refused duplicate: %+v", got)
	}
	_, err = s.GetProject(ctx, "prj_missing")
	wantCode(t, "missing project", err, protocol.CodeNotFound)

	// An id wins over a name that happens to equal it.
	odd := api.Project{ID: "prj_odd", Name: web.ID, Source: "/odd", BaseRef: "main", Mode: api.ModeShared, CreatedAt: base.Add(time.Hour)}
	if err := s.CreateProject(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetProject(ctx, web.ID); err != nil || got.ID != web.ID {
		t.Fatalf("GetProject(%s) with a project of that name: %+v, %v; want the project with that id", web.ID, got, err)
	}
}

// createGit stores a fixture workspace of project on branch, in state, and returns it.
func createGit(t *testing.T, s store.Store, name, project, branch string, state api.WorkspaceState, at time.Time) api.Workspace {
	t.Helper()
	w, a := Fixture(name, at, fmt.Sprintf("bootstrap-%s-%d", name, seq.Add(1)))
	w.Git = &api.WorkspaceGit{ProjectID: project, Mode: api.ModeShared, Strategy: api.StrategyClone, Branch: branch,
		BaseRef: "main", BaseCommit: strings.Repeat("c0ffee", 6) + "abcd", Provision: []string{"make deps"}}
	ctx := context.Background()
	if err := s.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatalf("CreateWorkspace(%s): %v", name, err)
	}
	if state != w.State {
		moveTo(t, s, w.ID, state)
		w.State = state
	}
	return w
}

func sameGit(t *testing.T, what string, got, want *api.WorkspaceGit) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: git = %+v; want %+v", what, got, want)
	}
	if got == nil {
		return
	}
	if got.ProjectID != want.ProjectID || got.Mode != want.Mode || got.Strategy != want.Strategy || got.Branch != want.Branch ||
		got.BaseRef != want.BaseRef || got.BaseCommit != want.BaseCommit || !slices.Equal(got.Provision, want.Provision) ||
		!slices.Equal(got.Teardown, want.Teardown) {
		t.Fatalf("%s: git = %+v\nwant %+v", what, *got, *want)
	}
}

func testProjectWorkspaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	plain, _ := create(t, s, "plain", base)
	ws := createGit(t, s, "git-one", "prj_a", "tether/one", api.StateProvisioning, base.Add(time.Second))
	got, err := s.GetWorkspace(ctx, ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameWorkspace(t, got, ws)
	sameGit(t, "GetWorkspace", got.Git, ws.Git)
	if got.ReclaimedAt != nil {
		t.Fatalf("a new workspace is reclaimed: %+v", got)
	}
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.Git != nil {
		t.Fatalf("a workspace of no project has git %+v", got.Git)
	}
	list, err := s.ListWorkspaces(ctx, false)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListWorkspaces = %v, %v", ids(list), err)
	}
	sameGit(t, "ListWorkspaces", list[1].Git, ws.Git)
	if list[0].Git != nil {
		t.Fatalf("listed workspace of no project has git %+v", list[0].Git)
	}

	// Project a: several workspaces on main and one on a feature branch; project b shares the
	// branch name.
	// (A branch has one live workspace at a time: the failed and deleted ones are made first.)
	failed := createGit(t, s, "git-failed", "prj_a", "main", api.StateFailed, base.Add(5*time.Second))
	createGit(t, s, "git-deleted", "prj_a", "main", api.StateDeleted, base.Add(6*time.Second))
	closed := createGit(t, s, "git-closed", "prj_a", "main", api.StateClosed, base.Add(3*time.Second))
	feature := createGit(t, s, "git-feature", "prj_a", "tether/feature", api.StateReady, base.Add(2*time.Second))
	other := createGit(t, s, "git-other", "prj_b", "main", api.StateReady, base.Add(7*time.Second))

	pw, err := s.ProjectWorkspaces(ctx, "prj_a")
	if want := []string{ws.ID, feature.ID, closed.ID, failed.ID}; err != nil || !slices.Equal(ids(pw), want) {
		t.Fatalf("ProjectWorkspaces(prj_a) = %v, %v; want oldest first without deleted %v", ids(pw), err, want)
	}
	sameGit(t, "ProjectWorkspaces", pw[1].Git, feature.Git)
	if pw, err := s.ProjectWorkspaces(ctx, "prj_b"); err != nil || !slices.Equal(ids(pw), []string{other.ID}) {
		t.Fatalf("ProjectWorkspaces(prj_b) = %v, %v", ids(pw), err)
	}
	for _, p := range []string{"prj_none", ""} {
		if pw, err := s.ProjectWorkspaces(ctx, p); err != nil || pw == nil || len(pw) != 0 {
			t.Fatalf("ProjectWorkspaces(%q) = %#v, %v; want empty", p, ids(pw), err)
		}
	}

	// The newest open workspace on main is the closed one: the failed and deleted ones are newer
	// but do not count.
	open := func(project, branch string) (api.Workspace, bool) {
		t.Helper()
		w, ok, err := s.OpenWorkspaceFor(ctx, project, branch)
		if err != nil {
			t.Fatalf("OpenWorkspaceFor(%s, %s): %v", project, branch, err)
		}
		return w, ok
	}
	if got, ok := open("prj_a", "main"); !ok || got.ID != closed.ID {
		t.Fatalf("open workspace of prj_a on main = %s (ok %v); want %s", got.ID, ok, closed.ID)
	} else {
		sameGit(t, "OpenWorkspaceFor", got.Git, closed.Git)
	}
	if got, ok := open("prj_a", "tether/feature"); !ok || got.ID != feature.ID {
		t.Fatalf("open workspace on the feature branch = %s (ok %v); want %s", got.ID, ok, feature.ID)
	}
	if got, ok := open("prj_b", "main"); !ok || got.ID != other.ID {
		t.Fatalf("open workspace of prj_b = %s (ok %v); want %s", got.ID, ok, other.ID)
	}
	for _, c := range [][2]string{{"prj_a", "nope"}, {"prj_none", "main"}, {"", ""}, {"", "main"}} {
		if got, ok := open(c[0], c[1]); ok {
			t.Fatalf("OpenWorkspaceFor(%q, %q) found %s", c[0], c[1], got.ID)
		}
	}
	// A second live workspace on a branch is refused while one lives (closed counts); once that
	// one is deleted the branch is free, and a failed one gives it back too.
	w2, a2 := Fixture("git-newer", base.Add(8*time.Second), fmt.Sprintf("bootstrap-newer-%d", seq.Add(1)))
	w2.Git = &api.WorkspaceGit{ProjectID: "prj_a", Mode: api.ModeShared, Strategy: api.StrategyClone, Branch: "main", BaseRef: "main"}
	if err := s.CreateWorkspace(ctx, w2, a2); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("a second live workspace on prj_a's main: %v", err)
	}
	if err := s.TransitionWorkspace(ctx, closed.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	newer := createGit(t, s, "git-newer", "prj_a", "main", api.StateProvisioning, base.Add(8*time.Second))
	if got, ok := open("prj_a", "main"); !ok || got.ID != newer.ID {
		t.Fatalf("open workspace on main = %s (ok %v); want %s", got.ID, ok, newer.ID)
	}
	if err := s.TransitionWorkspace(ctx, newer.ID, wsstate.FailProvision, "boom", "test"); err != nil {
		t.Fatal(err)
	}
	if got, ok := open("prj_a", "main"); ok {
		t.Fatalf("open workspace on main with none left open: %s (%s)", got.ID, got.State)
	}
}
