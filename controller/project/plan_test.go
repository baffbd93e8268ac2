package project

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// fakeStore holds one project and at most one open workspace on its branch.
type fakeStore struct {
	proj api.Project
	open *api.Workspace
}

func (f *fakeStore) CreateProject(context.Context, api.Project) error { return nil }
func (f *fakeStore) GetProject(_ context.Context, idOrName string) (api.Project, error) {
	if idOrName != f.proj.ID && idOrName != f.proj.Name {
		return api.Project{}, protocol.Errorf(protocol.CodeNotFound, "project %q not found", idOrName)
	}
	return f.proj, nil
}
func (f *fakeStore) ProjectWorkspaces(context.Context, string) ([]api.Workspace, error) {
	return nil, nil
}
func (f *fakeStore) OpenWorkspaceFor(_ context.Context, projectID, branch string) (api.Workspace, bool, error) {
	if f.open == nil || f.open.Git.Branch != branch {
		return api.Workspace{}, false, nil
	}
	return *f.open, true, nil
}

// unlocked says whether the branch's lock is free, waiting a moment for it.
func unlocked(p *Projects, projectID, branch string) bool {
	got := make(chan func(), 1)
	go func() { got <- p.locks.lock(projectID + "\x00branch\x00" + branch) }()
	select {
	case unlock := <-got:
		unlock()
		return true
	case <-time.After(time.Second):
		return false
	}
}

// Plan refuses what it must before anything is fetched, hands out a shared branch's open
// workspace, and holds the branch's lock only in a plan for a new workspace.
func TestPlanBeforeFetch(t *testing.T) {
	shared := api.Workspace{ID: "ws_1", Name: "one", Provider: "local", State: api.StateReady,
		Git: &api.WorkspaceGit{ProjectID: "prj_1", Mode: api.ModeShared, Branch: "tether/shared"}}
	st := &fakeStore{proj: api.Project{ID: "prj_1", Name: "p", BaseRef: "main", Mode: api.ModeShared}, open: &shared}
	p := New(Config{Store: st, DataDir: t.TempDir(), ExpectKind: func(string, string) error { return nil }})
	ctx := context.Background()
	for name, c := range map[string]struct {
		req  api.CreateWorkspaceRequest
		code protocol.Code
	}{
		"no project":           {api.CreateWorkspaceRequest{Project: "nope"}, protocol.CodeNotFound},
		"bad mode":             {api.CreateWorkspaceRequest{Project: "p", Mode: "odd"}, protocol.CodeInvalidArgument},
		"operator, no branch":  {api.CreateWorkspaceRequest{Project: "p", Mode: api.ModeOperatorBranch}, protocol.CodeInvalidArgument},
		"the base ref":         {api.CreateWorkspaceRequest{Project: "p", Branch: "refs/heads/main"}, protocol.CodeInvalidArgument},
		"isolated on shared":   {api.CreateWorkspaceRequest{Project: "p", Mode: api.ModeIsolated, Branch: "tether/shared"}, protocol.CodeConflict},
		"another provider":     {api.CreateWorkspaceRequest{Project: "p", Provider: "docker"}, protocol.CodeConflict},
		"provision on reuse":   {api.CreateWorkspaceRequest{Project: "p", Provision: []string{"make"}}, protocol.CodeInvalidArgument},
		"an invalid branch":    {api.CreateWorkspaceRequest{Project: "p", Branch: "a..b"}, protocol.CodeInvalidArgument},
		"shared, reused (ok)":  {api.CreateWorkspaceRequest{Project: "p"}, ""},
		"shared, named branch": {api.CreateWorkspaceRequest{Project: "p", Branch: "tether/shared", Provider: "local"}, ""},
	} {
		plan, err := p.Plan(ctx, c.req)
		if protocol.CodeOf(err) != c.code && (c.code != "" || err != nil) {
			t.Errorf("%s: %v, want %q", name, err, c.code)
		}
		if c.code == "" && (plan.Reuse == nil || plan.Reuse.ID != shared.ID || plan.Git != nil) {
			t.Errorf("%s: plan %+v, want the shared workspace", name, plan)
		}
		plan.Release()
		plan.Release()
		if !unlocked(p, "prj_1", "tether/shared") {
			t.Fatalf("%s: the branch's lock is still held", name)
		}
	}
}
