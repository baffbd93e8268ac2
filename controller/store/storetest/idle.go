package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// A workspace's idle policy (unset, set at creation, changed, off, back to the default) and its
// last activity round-trip without touching updated_at; activity only ever moves forward.
func testIdle(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := Fixture("idle-own", base, "bootstrap-idle-own")
	w.IdlePolicy = &api.IdlePolicy{Action: api.IdleClose, After: protocol.Duration(30 * time.Minute)}
	if err := s.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.IdlePolicy == nil || *got.IdlePolicy != *w.IdlePolicy || got.LastActivityAt != nil {
		t.Fatalf("created with a policy: %+v, %v", got, err)
	}
	plain, _ := create(t, s, "idle-default", base)
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.IdlePolicy != nil {
		t.Fatalf("a workspace without a policy reads %+v", *got.IdlePolicy)
	}
	for _, p := range []*api.IdlePolicy{{Action: api.IdleStop, After: protocol.Duration(time.Hour)}, {Action: api.IdleOff}} {
		if err := s.SetIdlePolicy(ctx, plain.ID, p); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetWorkspace(ctx, plain.ID); got.IdlePolicy == nil || *got.IdlePolicy != *p {
			t.Fatalf("set %+v, read %+v", *p, got.IdlePolicy)
		}
	}
	if err := s.SetIdlePolicy(ctx, w.ID, nil); err != nil {
		t.Fatal(err)
	}
	later, earlier := base.Add(2*time.Hour), base.Add(time.Hour)
	if err := s.TouchWorkspaces(ctx, map[string]time.Time{w.ID: later, "ws-missing": later}); err != nil {
		t.Fatal(err)
	}
	// Another controller's older flush arrives last: the newer activity stays.
	if err := s.TouchWorkspaces(ctx, map[string]time.Time{w.ID: earlier}); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetWorkspace(ctx, w.ID)
	if err != nil || got.IdlePolicy != nil || got.LastActivityAt == nil || !got.LastActivityAt.Equal(later) || !got.UpdatedAt.Equal(w.UpdatedAt) {
		t.Fatalf("after the default and activity: %+v, %v", got, err)
	}
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.LastActivityAt != nil {
		t.Fatalf("activity of another workspace landed on %s: %v", plain.ID, got.LastActivityAt)
	}
	wantCode(t, "policy of a missing workspace", s.SetIdlePolicy(ctx, "ws-missing", nil), protocol.CodeNotFound)
}
