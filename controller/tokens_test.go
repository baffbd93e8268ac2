package controller

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// apiClient is a client of the test controller with token, which does not retry.
func (tc *testController) apiClient(t *testing.T, token string) *client.Client {
	t.Helper()
	cl, err := client.New(tc.url, token)
	if err != nil {
		t.Fatal(err)
	}
	return cl.WithRetryFor(0)
}

// call makes one REST call with token and returns the status and body.
func (tc *testController) call(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, tc.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", protocol.Bearer(token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wantCode(t *testing.T, what string, err error, code protocol.Code) {
	t.Helper()
	if protocol.CodeOf(err) != code {
		t.Fatalf("%s: %v; want %s", what, err, code)
	}
}

func TestAPITokens(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	mine := tc.addAllocation(t, "mine")
	tc.addAllocation(t, "theirs")
	op := tc.apiClient(t, tc.s.OperatorToken())

	ci, err := op.CreateToken(ctx, api.CreateTokenRequest{Name: "ci", Workspaces: []string{"mine", mine.workspaceID}, TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ci.Token, prefixAPI) || len(ci.Token) != len(prefixAPI)+43 ||
		!slices.Equal(ci.Workspaces, []string{mine.workspaceID}) || ci.ExpiresAt == nil || !ci.ExpiresAt.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("created token: %+v", ci)
	}
	admin, err := op.CreateToken(ctx, api.CreateTokenRequest{Name: "admin"})
	if err != nil || len(admin.Workspaces) != 0 || admin.ExpiresAt != nil {
		t.Fatalf("unlimited token: %+v, %v", admin, err)
	}

	// The list shows neither secrets nor hashes.
	status, body := tc.call(t, "GET", "/v1/tokens", tc.s.OperatorToken(), "")
	for _, secret := range []string{ci.Token, admin.Token} {
		if status != http.StatusOK || strings.Contains(body, secret) || strings.Contains(body, hashToken(secret)) || strings.Contains(body, "hash") {
			t.Fatalf("GET /v1/tokens = %d %s: shows a secret or a hash", status, body)
		}
	}

	// Creation refuses what it cannot record.
	for what, req := range map[string]api.CreateTokenRequest{
		"unknown workspace": {Name: "x", Workspaces: []string{"nosuch"}},
		"bad name":          {Name: "bad name"},
		"bad ttl":           {Name: "x", TTL: "soon"},
		"taken name":        {Name: "ci"},
	} {
		_, err := op.CreateToken(ctx, req)
		want := map[string]protocol.Code{"unknown workspace": protocol.CodeNotFound, "taken name": protocol.CodeExists}[what]
		if want == "" {
			want = protocol.CodeInvalidArgument
		}
		wantCode(t, what, err, want)
	}

	// The limited token sees its workspace alone and may not manage tokens.
	limited := tc.apiClient(t, ci.Token)
	list, err := limited.ListWorkspaces(ctx, true)
	if err != nil || len(list) != 1 || list[0].ID != mine.workspaceID {
		t.Fatalf("limited token's workspaces: %+v, %v", list, err)
	}
	_, err = limited.CreateToken(ctx, api.CreateTokenRequest{Name: "escalate"})
	wantCode(t, "limited token creating a token", err, protocol.CodeUnauthorized)
	_, err = limited.ListTokens(ctx)
	wantCode(t, "limited token listing tokens", err, protocol.CodeUnauthorized)
	wantCode(t, "limited token revoking a token", limited.RevokeToken(ctx, "admin"), protocol.CodeUnauthorized)

	// The unlimited one manages tokens as the operator does.
	unlimited := tc.apiClient(t, admin.Token)
	if toks, err := unlimited.ListTokens(ctx); err != nil || len(toks) != 2 {
		t.Fatalf("unlimited token's list: %+v, %v", toks, err)
	}
	if all, err := unlimited.ListWorkspaces(ctx, true); err != nil || len(all) != 2 {
		t.Fatalf("unlimited token's workspaces: %+v, %v", all, err)
	}

	// A secret the controller never made is refused, whatever its prefix.
	for _, wrong := range []string{newAPISecret(), ci.Token + "x", ci.Token[:len(ci.Token)-1], strings.ToUpper(ci.Token)} {
		_, err := tc.apiClient(t, wrong).ListWorkspaces(ctx, false)
		wantCode(t, "wrong API token", err, protocol.CodeUnauthorized)
	}

	// Expired by the controller's clock.
	clock.Advance(time.Hour)
	_, err = limited.ListWorkspaces(ctx, false)
	wantCode(t, "expired token", err, protocol.CodeUnauthorized)
	if !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}

	// Revoked at once; the name is free again.
	if err := op.RevokeToken(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	_, err = unlimited.ListWorkspaces(ctx, false)
	wantCode(t, "revoked token", err, protocol.CodeUnauthorized)
	wantCode(t, "second revoke", op.RevokeToken(ctx, "admin"), protocol.CodeNotFound)
	again, err := op.CreateToken(ctx, api.CreateTokenRequest{Name: "admin"})
	if err != nil || again.Token == admin.Token {
		t.Fatalf("a new token of a revoked one's name: %+v, %v", again, err)
	}
	toks, err := op.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, tok := range toks {
		if tok.Token != "" {
			t.Fatalf("listed token shows its secret: %+v", tok)
		}
		flags = append(flags, tok.Name+":"+map[bool]string{true: "revoked", false: "live"}[tok.Revoked]+":"+map[bool]string{true: "expired", false: "valid"}[tok.Expired])
	}
	if want := []string{"admin:revoked:valid", "ci:live:expired", "admin:live:valid"}; !slices.Equal(flags, want) {
		t.Fatalf("token list flags %v; want %v", flags, want)
	}

	// The operator token still works, whatever happened to API tokens.
	if _, err := op.ListWorkspaces(ctx, false); err != nil {
		t.Fatal(err)
	}
}

// scopeFixture is two workspaces, each a checkout of its own project, the records of the other
// one (a snapshot, an artifact, a run, a token limited to it): what a token limited to "mine"
// must not see.
type scopeFixture struct {
	mine, theirs                   api.Workspace
	mineProject, theirsProject     api.Project
	snapshot, artifact, run, token string // theirs
}

func newScopeFixture(t *testing.T, tc *testController) scopeFixture {
	t.Helper()
	ctx := context.Background()
	st := tc.s.store
	var f scopeFixture
	now := time.Now().UTC()
	project := func(name string) api.Project {
		p := api.Project{ID: newID("prj_"), Name: name, Source: "/nowhere/" + name, BaseRef: "main", Mode: api.ModeIsolated, CreatedAt: now}
		if err := st.CreateProject(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f.mineProject, f.theirsProject = project("mine-project"), project("theirs-project")
	for _, w := range []struct {
		ws   *api.Workspace
		name string
		proj api.Project
	}{{&f.mine, "mine", f.mineProject}, {&f.theirs, "theirs", f.theirsProject}} {
		ws := api.Workspace{ID: newID("ws_"), Name: w.name, Provider: "local", State: api.StateProvisioning,
			AllocationID: newID("al_"), CreatedAt: now, UpdatedAt: now,
			Git: &api.WorkspaceGit{ProjectID: w.proj.ID, Mode: api.ModeIsolated, Strategy: api.StrategyClone, Branch: "tether/" + w.name, BaseRef: "main"}}
		al := store.Allocation{ID: ws.AllocationID, WorkspaceID: ws.ID, Provider: "local", State: store.AllocStarting,
			BootstrapHash: hashToken(newToken(prefixBootstrap)), CreatedAt: now, UpdatedAt: now}
		if err := st.CreateWorkspace(ctx, ws, al); err != nil {
			t.Fatal(err)
		}
		*w.ws = ws
	}
	f.snapshot, f.artifact, f.run = newID("snap_"), newID("art_"), newID("run_")
	if err := st.CreateSnapshot(ctx, api.Snapshot{ID: f.snapshot, WorkspaceID: f.theirs.ID, ObjectKey: "snapshots/x", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateArtifact(ctx, api.Artifact{ID: f.artifact, WorkspaceID: f.theirs.ID, Name: "a", SHA256: sha(nil),
		ObjectKey: artifactKey(sha(nil)), Untrusted: true, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, api.Run{ID: f.run, WorkspaceID: f.theirs.ID, AllocationID: f.theirs.AllocationID,
		Argv: []string{"true"}, State: api.RunRunning, StartedAt: now}); err != nil {
		t.Fatal(err)
	}
	tok, err := tc.s.CreateToken(ctx, api.CreateTokenRequest{Name: "limited", Workspaces: []string{"mine"}})
	if err != nil {
		t.Fatal(err)
	}
	f.token = tok.Token
	if _, err := tc.s.CreateToken(ctx, api.CreateTokenRequest{Name: "theirs-token", Workspaces: []string{"theirs"}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLimitedTokenRoutes walks every route of the operator API with a token limited to one
// workspace, naming the other workspace's records: each answer must be not_found, in the very
// words given for a record that does not exist, or the refusal of a route a limited token may
// not use. A route added without its scope fails here.
func TestLimitedTokenRoutes(t *testing.T) {
	tc := newTestController(t)
	f := newScopeFixture(t, tc)
	// What each kind of {id} is, for the other workspace and for nothing at all.
	ids := map[string][][2]string{
		"workspaces": {{f.theirs.ID, "ws_00000000deadbeef"}, {f.theirs.Name, "nosuch"}},
		"snapshots":  {{f.snapshot, "snap_00000000deadbeef"}},
		"artifacts":  {{f.artifact, "art_00000000deadbeef"}},
		"runs":       {{f.run, "run_00000000deadbeef"}},
		"projects":   {{f.theirsProject.ID, "prj_00000000deadbeef"}, {f.theirsProject.Name, "nosuch"}},
	}
	refused := func(status int, body string) bool {
		return status == http.StatusUnauthorized && strings.Contains(body, `"code":"unauthorized"`) && strings.Contains(body, "limited to its workspaces")
	}
	for _, rt := range tc.s.routes() {
		method, pattern, ok := strings.Cut(rt.pattern, " ")
		if !ok { // a route of any method (the service proxy)
			method, pattern = http.MethodGet, rt.pattern
		}
		path := strings.NewReplacer("{name}", "web", "{path...}", "f.txt").Replace(pattern)
		if !strings.Contains(path, "{id}") {
			status, body := tc.call(t, method, path, f.token, "{}")
			if refused(status, body) {
				continue
			}
			if method != http.MethodGet || status != http.StatusOK {
				t.Errorf("%s with a limited token: %d %s; want a refusal or a list", rt.pattern, status, body)
			}
			for _, other := range []string{f.theirs.ID, f.theirs.Name, f.theirsProject.ID, f.snapshot, f.artifact, f.run} {
				if strings.Contains(body, other) {
					t.Errorf("%s with a limited token lists %s of another workspace: %s", rt.pattern, other, body)
				}
			}
			continue
		}
		kind := strings.Split(pattern, "/")[2]
		pairs, ok := ids[kind]
		if !ok {
			t.Fatalf("route %s: this test does not know what {id} names under /v1/%s; teach it", rt.pattern, kind)
		}
		for _, pair := range pairs {
			status, body := tc.call(t, method, strings.Replace(path, "{id}", pair[0], 1), f.token, "{}")
			if refused(status, body) {
				continue
			}
			mStatus, mBody := tc.call(t, method, strings.Replace(path, "{id}", pair[1], 1), f.token, "{}")
			if status != http.StatusNotFound || status != mStatus || strings.ReplaceAll(body, pair[0], "ID") != strings.ReplaceAll(mBody, pair[1], "ID") {
				t.Errorf("%s naming another workspace's %s: %d %s; a missing one: %d %s — want the same not_found",
					rt.pattern, pair[0], status, strings.TrimSpace(body), mStatus, strings.TrimSpace(mBody))
			}
		}
	}

	// Nothing of theirs changed.
	ctx := context.Background()
	if ws, err := tc.s.store.GetWorkspace(ctx, f.theirs.ID); err != nil || ws.State != api.StateProvisioning {
		t.Fatalf("their workspace after the walk: %+v, %v", ws, err)
	}
	if a, err := tc.s.store.GetArtifact(ctx, f.artifact); err != nil || a.RevokedAt != nil {
		t.Fatalf("their artifact after the walk: %+v, %v", a, err)
	}
	if toks, err := tc.s.store.ListTokens(ctx); err != nil || len(toks) != 2 || !toks[0].RevokedAt.IsZero() || !toks[1].RevokedAt.IsZero() {
		t.Fatalf("tokens after the walk: %+v, %v", toks, err)
	}
}

// What a limited token may see of its own, it sees.
func TestLimitedTokenSeesItsOwn(t *testing.T) {
	tc := newTestController(t)
	f := newScopeFixture(t, tc)
	ctx := context.Background()
	cl := tc.apiClient(t, f.token)
	if ws, err := cl.GetWorkspace(ctx, "mine"); err != nil || ws.ID != f.mine.ID {
		t.Fatalf("own workspace: %+v, %v", ws, err)
	}
	if runs, err := cl.ListRuns(ctx, f.mine.ID); err != nil || len(runs) != 0 {
		t.Fatalf("own runs: %+v, %v", runs, err)
	}
	projects, err := cl.ListProjects(ctx)
	if err != nil || len(projects) != 1 || projects[0].ID != f.mineProject.ID {
		t.Fatalf("projects a limited token sees: %+v, %v; want its workspace's alone", projects, err)
	}
	if p, err := cl.GetProject(ctx, "mine-project"); err != nil || p.ID != f.mineProject.ID {
		t.Fatalf("own project: %+v, %v", p, err)
	}
	if _, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "more"}); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("a limited token creating a workspace: %v; want unauthorized", err)
	}
}
