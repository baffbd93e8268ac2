package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func sameToken(t *testing.T, got, want store.Token) {
	t.Helper()
	utc := func(x time.Time) bool { return x.IsZero() || x.Location() == time.UTC }
	if got.Name != want.Name || got.Hash != want.Hash || !slices.Equal(got.Workspaces, want.Workspaces) ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || !got.RevokedAt.Equal(want.RevokedAt) ||
		!utc(got.CreatedAt) || !utc(got.ExpiresAt) || !utc(got.RevokedAt) {
		t.Fatalf("token = %+v\nwant    %+v", got, want)
	}
}

func tokenNames(ts []store.Token) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// Tokens round-trip, are found by hash whatever their state, and one live token has a name: a
// revoked one gives it back.
func testTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListTokens(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty store lists %#v, %v", list, err)
	}
	// Times in another zone come back as the same instant, in UTC.
	east := time.FixedZone("east", 3*3600)
	ci := store.Token{Name: "ci", Hash: "hash-ci", Workspaces: []string{"ws_a", "ws_b"},
		CreatedAt: base.Add(time.Second).In(east), ExpiresAt: base.Add(time.Hour).In(east)}
	admin := store.Token{Name: "admin", Hash: "hash-admin", Workspaces: []string{}, CreatedAt: base}
	for _, tok := range []store.Token{ci, admin} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s): %v", tok.Name, err)
		}
	}
	got, err := s.TokenByHash(ctx, ci.Hash)
	if err != nil {
		t.Fatal(err)
	}
	sameToken(t, got, ci)
	got, err = s.TokenByHash(ctx, admin.Hash)
	if err != nil {
		t.Fatal(err)
	}
	sameToken(t, got, admin) // no expiry, no revocation: zero times; no workspaces: all
	_, err = s.TokenByHash(ctx, "hash-missing")
	wantCode(t, "TokenByHash of an unknown hash", err, protocol.CodeNotFound)

	dup := store.Token{Name: "ci", Hash: "hash-ci-2", CreatedAt: base.Add(2 * time.Second)}
	wantCode(t, "CreateToken with a live token's name", s.CreateToken(ctx, dup), protocol.CodeExists)

	revokedAt := base.Add(time.Minute)
	if err := s.RevokeToken(ctx, "ci", revokedAt); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RevokeToken of a revoked token", s.RevokeToken(ctx, "ci", revokedAt.Add(time.Minute)), protocol.CodeNotFound)
	wantCode(t, "RevokeToken of an unknown name", s.RevokeToken(ctx, "nobody", revokedAt), protocol.CodeNotFound)
	// A revoked token is still found (the caller refuses it), with its revocation time.
	got, err = s.TokenByHash(ctx, ci.Hash)
	if err != nil {
		t.Fatal(err)
	}
	ci.RevokedAt = revokedAt
	sameToken(t, got, ci)

	// The name is free again.
	if err := s.CreateToken(ctx, dup); err != nil {
		t.Fatalf("CreateToken with a revoked token's name: %v", err)
	}
	list, err := s.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := tokenNames(list); !slices.Equal(names, []string{"admin", "ci", "ci"}) {
		t.Fatalf("ListTokens = %v; want admin, ci (revoked), ci, by creation", names)
	}
	sameToken(t, list[1], ci)
	dup.Workspaces = []string{}
	sameToken(t, list[2], dup)
	// Two live tokens under one name, again: refused even with a new hash.
	wantCode(t, "CreateToken with the new live token's name", s.CreateToken(ctx,
		store.Token{Name: "ci", Hash: "hash-ci-3", CreatedAt: base}), protocol.CodeExists)
}

// A hash identifies one token: a second token with it is refused.
func testTokenHashUnique(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateToken(ctx, store.Token{Name: "one", Hash: "same", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, store.Token{Name: "two", Hash: "same", CreatedAt: base}); err == nil {
		t.Fatal("a second token with the same hash was created")
	}
	if got, err := s.TokenByHash(ctx, "same"); err != nil || got.Name != "one" {
		t.Fatalf("TokenByHash = %+v, %v; want the first token", got, err)
	}
}
