package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func sameUpload(t *testing.T, got, want store.UploadSession) {
	t.Helper()
	utc := func(x time.Time) bool { return x.IsZero() || x.Location() == time.UTC }
	if got.ID != want.ID || got.WorkspaceID != want.WorkspaceID || got.Path != want.Path || got.Size != want.Size ||
		got.SHA256 != want.SHA256 || got.Mode != want.Mode || got.Replace != want.Replace || got.CreatedBy != want.CreatedBy ||
		got.Offset != want.Offset || got.Received != want.Received || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.ExpiresAt.Equal(want.ExpiresAt) || !got.CompletedAt.Equal(want.CompletedAt) ||
		!utc(got.CreatedAt) || !utc(got.ExpiresAt) || !utc(got.CompletedAt) {
		t.Fatalf("upload = %+v\nwant     %+v", got, want)
	}
}

// Upload sessions round-trip (sizes past 4 GiB included), are listed per workspace and path,
// record progress (received adds up, completion is kept once set), are found expired by time,
// and are deleted.
func testUploadSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	east := time.FixedZone("east", 3*3600)
	a := store.UploadSession{ID: "up_a", WorkspaceID: "ws_a", Path: "big.bin", Size: 5 << 30, SHA256: "aa", Mode: 0o600,
		Replace: true, CreatedBy: "operator", CreatedAt: base.In(east), ExpiresAt: base.Add(24 * time.Hour).In(east)}
	b := store.UploadSession{ID: "up_b", WorkspaceID: "ws_a", Path: "other.bin", Size: 10, SHA256: "bb", CreatedBy: "API token ci",
		CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(time.Hour)}
	c := store.UploadSession{ID: "up_c", WorkspaceID: "ws_b", Path: "big.bin", Size: 1, SHA256: "cc", CreatedBy: "operator",
		CreatedAt: base, ExpiresAt: base.Add(time.Minute)}
	for _, u := range []store.UploadSession{a, b, c} {
		if err := s.CreateUploadSession(ctx, u); err != nil {
			t.Fatalf("CreateUploadSession(%s): %v", u.ID, err)
		}
	}
	if err := s.CreateUploadSession(ctx, a); err == nil {
		t.Fatal("a second session with the same id was recorded")
	}
	got, err := s.GetUploadSession(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameUpload(t, got, a)
	_, err = s.GetUploadSession(ctx, "up_missing")
	wantCode(t, "GetUploadSession of an unknown id", err, protocol.CodeNotFound)

	list, err := s.ListUploadSessions(ctx, "ws_a", "")
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListUploadSessions(ws_a) = %+v, %v; want up_a, up_b", list, err)
	}
	list, err = s.ListUploadSessions(ctx, "ws_a", "big.bin")
	if err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("ListUploadSessions(ws_a, big.bin) = %+v, %v; want up_a", list, err)
	}
	if list, err := s.ListUploadSessions(ctx, "ws_none", ""); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("ListUploadSessions of a workspace without any = %#v, %v", list, err)
	}

	if err := s.RecordUploadProgress(ctx, a.ID, 64<<20, 64<<20, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUploadProgress(ctx, a.ID, 64<<20, 10, time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := base.Add(time.Minute)
	if err := s.RecordUploadProgress(ctx, a.ID, a.Size, a.Size-64<<20, done); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUploadProgress(ctx, a.ID, a.Size, 0, done.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	a.Offset, a.Received, a.CompletedAt = a.Size, a.Size+10, done
	got, err = s.GetUploadSession(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameUpload(t, got, a) // the first completion time is kept
	wantCode(t, "RecordUploadProgress of an unknown id", s.RecordUploadProgress(ctx, "up_missing", 1, 1, time.Time{}), protocol.CodeNotFound)

	exp, err := s.ExpiredUploadSessions(ctx, base.Add(2*time.Hour), 10)
	if err != nil || len(exp) != 2 || exp[0].ID != c.ID || exp[1].ID != b.ID {
		t.Fatalf("ExpiredUploadSessions = %+v, %v; want up_c, up_b (oldest expiry first)", exp, err)
	}
	if exp, err := s.ExpiredUploadSessions(ctx, base.Add(2*time.Hour), 1); err != nil || len(exp) != 1 {
		t.Fatalf("ExpiredUploadSessions limited to 1 = %+v, %v", exp, err)
	}
	if err := s.DeleteUploadSession(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "DeleteUploadSession twice", s.DeleteUploadSession(ctx, c.ID), protocol.CodeNotFound)
	_, err = s.GetUploadSession(ctx, c.ID)
	wantCode(t, "GetUploadSession after delete", err, protocol.CodeNotFound)
}
