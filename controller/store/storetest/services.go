package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
)

func testServices(t *testing.T, s store.Store) {
	ctx := context.Background()
	w1, _ := create(t, s, "svc-owner", base)
	w2, _ := create(t, s, "svc-other", base)
	started := base.Add(time.Second)
	web := api.Service{WorkspaceID: w1.ID, Name: "web", State: "starting", Port: 8080, PID: 42,
		Argv: []string{"./server", "-v"}, StartedAt: &started, UpdatedAt: started}
	if err := s.PutService(ctx, web); err != nil {
		t.Fatal(err)
	}
	db := api.Service{WorkspaceID: w1.ID, Name: "db", State: "failed", Reason: "readiness timeout",
		StderrTail: "boom\n", Restarts: 2, LogEnd: 17, UpdatedAt: started}
	if err := s.PutService(ctx, db); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListServices(ctx, w1.ID)
	if err != nil || len(list) != 2 || list[0].Name != "db" || list[1].Name != "web" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	got := list[1]
	if got.WorkspaceID != w1.ID || got.State != "starting" || got.Port != 8080 || got.PID != 42 ||
		!slices.Equal(got.Argv, web.Argv) || got.StartedAt == nil || !got.StartedAt.Equal(started) ||
		got.ReadyAt != nil || got.StoppedAt != nil || !got.UpdatedAt.Equal(started) {
		t.Fatalf("web: %+v", got)
	}
	if d := list[0]; d.Reason != db.Reason || d.StderrTail != db.StderrTail || d.Restarts != 2 || d.LogEnd != 17 || d.StartedAt != nil || d.Argv == nil {
		t.Fatalf("db: %+v", d)
	}

	// A later status replaces the record.
	ready, stopped := base.Add(2*time.Second), base.Add(time.Minute)
	web.State, web.ReadyAt, web.StoppedAt, web.PID, web.UpdatedAt = "stopped", &ready, &stopped, 0, stopped
	if err := s.PutService(ctx, web); err != nil {
		t.Fatal(err)
	}
	list, err = s.ListServices(ctx, w1.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("list after update: %+v, %v", list, err)
	}
	got = list[1]
	if got.State != "stopped" || got.PID != 0 || got.ReadyAt == nil || !got.ReadyAt.Equal(ready) ||
		got.StoppedAt == nil || !got.StoppedAt.Equal(stopped) || !got.UpdatedAt.Equal(stopped) {
		t.Fatalf("web after update: %+v", got)
	}
	if list, err := s.ListServices(ctx, w2.ID); err != nil || len(list) != 0 || list == nil {
		t.Fatalf("other workspace's list: %#v, %v", list, err)
	}
}
