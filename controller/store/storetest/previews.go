package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func samePreview(t *testing.T, got, want store.Preview) {
	t.Helper()
	utc := func(x time.Time) bool { return x.IsZero() || x.Location() == time.UTC }
	if got.ID != want.ID || got.Hash != want.Hash || got.WorkspaceID != want.WorkspaceID || got.Service != want.Service ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || !got.RevokedAt.Equal(want.RevokedAt) ||
		!utc(got.CreatedAt) || !utc(got.ExpiresAt) || !utc(got.RevokedAt) {
		t.Fatalf("preview = %+v\nwant      %+v", got, want)
	}
}

// Previews round-trip, are found by hash whatever their state, are listed and revoked per
// service (another service's and another workspace's untouched), and purged once long dead.
func testPreviews(t *testing.T, s store.Store) {
	ctx := context.Background()
	east := time.FixedZone("east", 3*3600)
	web1 := store.Preview{ID: "pv_1", Hash: "hash-1", WorkspaceID: "ws_a", Service: "web",
		CreatedAt: base.In(east), ExpiresAt: base.Add(time.Hour).In(east)}
	web2 := store.Preview{ID: "pv_2", Hash: "hash-2", WorkspaceID: "ws_a", Service: "web",
		CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(2 * time.Hour)}
	api := store.Preview{ID: "pv_3", Hash: "hash-3", WorkspaceID: "ws_a", Service: "api",
		CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	other := store.Preview{ID: "pv_4", Hash: "hash-4", WorkspaceID: "ws_b", Service: "web",
		CreatedAt: base, ExpiresAt: base.Add(time.Minute)}
	for _, p := range []store.Preview{web2, web1, api, other} {
		if err := s.CreatePreview(ctx, p); err != nil {
			t.Fatalf("CreatePreview(%s): %v", p.ID, err)
		}
	}
	if err := s.CreatePreview(ctx, store.Preview{ID: "pv_5", Hash: web1.Hash, WorkspaceID: "ws_a", Service: "web",
		CreatedAt: base, ExpiresAt: base.Add(time.Hour)}); err == nil {
		t.Fatal("a second preview with the same hash was recorded")
	}
	got, err := s.PreviewByHash(ctx, web1.Hash)
	if err != nil {
		t.Fatal(err)
	}
	samePreview(t, got, web1)
	_, err = s.PreviewByHash(ctx, "hash-missing")
	wantCode(t, "PreviewByHash of an unknown hash", err, protocol.CodeNotFound)

	list, err := s.ListPreviews(ctx, "ws_a", "web")
	if err != nil || len(list) != 2 || list[0].ID != web1.ID || list[1].ID != web2.ID {
		t.Fatalf("ListPreviews(ws_a, web) = %+v, %v; want pv_1, pv_2", list, err)
	}
	if list, err := s.ListPreviews(ctx, "ws_a", "none"); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("ListPreviews of a service without any = %#v, %v", list, err)
	}

	at := base.Add(10 * time.Minute)
	if n, err := s.RevokePreviews(ctx, "ws_a", "web", at); err != nil || n != 2 {
		t.Fatalf("RevokePreviews = %d, %v; want 2", n, err)
	}
	if n, err := s.RevokePreviews(ctx, "ws_a", "web", at.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("RevokePreviews again = %d, %v; want 0 (already revoked)", n, err)
	}
	got, err = s.PreviewByHash(ctx, web2.Hash)
	if err != nil {
		t.Fatal(err)
	}
	web2.RevokedAt = at
	samePreview(t, got, web2)
	for _, p := range []store.Preview{api, other} {
		got, err := s.PreviewByHash(ctx, p.Hash)
		if err != nil {
			t.Fatal(err)
		}
		samePreview(t, got, p) // another service's, another workspace's: not revoked
	}

	// Purge: the revoked ones (at +10m) and other (expired at +1m) go with a cutoff of +30m;
	// api (expires at +1h) stays.
	if n, err := s.PurgePreviews(ctx, base.Add(30*time.Minute)); err != nil || n != 3 {
		t.Fatalf("PurgePreviews = %d, %v; want 3", n, err)
	}
	if _, err := s.PreviewByHash(ctx, api.Hash); err != nil {
		t.Fatalf("a live preview was purged: %v", err)
	}
	_, err = s.PreviewByHash(ctx, other.Hash)
	wantCode(t, "PreviewByHash of a purged preview", err, protocol.CodeNotFound)
}
