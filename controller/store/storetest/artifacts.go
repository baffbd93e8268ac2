package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func testArtifacts(t *testing.T, s store.Store) {
	ctx := context.Background()
	w1, _ := create(t, s, "art-owner", base)
	w2, _ := create(t, s, "art-other", base)
	sha := strings.Repeat("ab", 32)
	a := api.Artifact{ID: "art_one", WorkspaceID: w1.ID, Name: "resp.json", Bytes: 42, SHA256: sha,
		ObjectKey: "artifacts/" + sha, Untrusted: true, CreatedAt: base}
	if err := s.CreateArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := api.Artifact{ID: "art_two", WorkspaceID: w1.ID, Bytes: 0, SHA256: sha, ObjectKey: "artifacts/" + sha, CreatedAt: base.Add(time.Second)}
	if err := s.CreateArtifact(ctx, b); err != nil {
		t.Fatalf("a second artifact with the same content: %v", err)
	}
	got, err := s.GetArtifact(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.WorkspaceID != w1.ID || got.Name != a.Name || got.Bytes != 42 || got.SHA256 != sha ||
		got.ObjectKey != a.ObjectKey || !got.Untrusted || got.RevokedAt != nil || !got.CreatedAt.Equal(base) {
		t.Fatalf("artifact: %+v", got)
	}
	if got, _ := s.GetArtifact(ctx, b.ID); !got.Untrusted {
		t.Fatal("an artifact came back trusted")
	}
	_, err = s.GetArtifact(ctx, "art_missing")
	wantCode(t, "missing artifact", err, protocol.CodeNotFound)

	list, err := s.ListArtifacts(ctx, w1.ID)
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if list, err := s.ListArtifacts(ctx, w2.ID); err != nil || len(list) != 0 {
		t.Fatalf("other workspace's list: %+v, %v", list, err)
	}

	at := base.Add(time.Hour)
	r, err := s.RevokeArtifact(ctx, a.ID, at)
	if err != nil || r.RevokedAt == nil || !r.RevokedAt.Equal(at) {
		t.Fatalf("revoke: %+v, %v", r, err)
	}
	r, err = s.RevokeArtifact(ctx, a.ID, at.Add(time.Hour))
	if err != nil || r.RevokedAt == nil || !r.RevokedAt.Equal(at) {
		t.Fatalf("second revoke moved the time: %+v, %v", r, err)
	}
	if got, _ := s.GetArtifact(ctx, b.ID); got.RevokedAt != nil {
		t.Fatal("revoking one artifact revoked another")
	}
	_, err = s.RevokeArtifact(ctx, "art_missing", at)
	wantCode(t, "revoke of a missing artifact", err, protocol.CodeNotFound)
}
