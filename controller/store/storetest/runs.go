package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func ptr(n int) *int { return &n }

func runIDs(rs []api.Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func testRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "runs", base)
	w2, a2 := create(t, s, "runs2", base)
	mk := func(id string, ws api.Workspace, alloc string, at time.Time) api.Run {
		r := api.Run{ID: id, WorkspaceID: ws.ID, AllocationID: alloc, Argv: []string{"sh", "-c", "echo 'hi there'"},
			Cwd: "sub/dir", State: api.RunRunning, StartedAt: at}
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatalf("CreateRun(%s): %v", id, err)
		}
		return r
	}
	r3 := mk("run-c", w, a.ID, base.Add(3*time.Second))
	r1 := mk("run-a", w, a.ID, base.Add(1*time.Second))
	r2 := mk("run-b", w, a.ID, base.Add(2500*time.Millisecond))
	mk("run-other", w2, a2.ID, base)

	got, err := s.GetRun(ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r1.ID || got.WorkspaceID != w.ID || got.AllocationID != a.ID || !slices.Equal(got.Argv, r1.Argv) ||
		got.Cwd != r1.Cwd || got.State != api.RunRunning || got.ExitCode != nil || got.FinishedAt != nil ||
		!got.StartedAt.Equal(r1.StartedAt) {
		t.Fatalf("run = %+v\nwant  %+v", got, r1)
	}

	list, err := s.ListRuns(ctx, w.ID)
	if err != nil || !slices.Equal(runIDs(list), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("ListRuns = %v, %v; want oldest first [run-a run-b run-c]", runIDs(list), err)
	}
	running, err := s.RunningRuns(ctx, a.ID)
	if err != nil || !slices.Equal(runIDs(running), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("RunningRuns = %v, %v", runIDs(running), err)
	}

	// Exit code 0 is recorded as 0, not as "none".
	end := base.Add(time.Minute)
	if err := s.FinishRun(ctx, store.RunFinish{ID: r1.ID, State: api.RunExited, ExitCode: ptr(0), At: end}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetRun(ctx, r1.ID)
	if got.State != api.RunExited || got.ExitCode == nil || *got.ExitCode != 0 || got.FinishedAt == nil || !got.FinishedAt.Equal(end) {
		t.Fatalf("finished run = %+v", got)
	}
	// Killed by a signal: no exit code.
	if err := s.FinishRun(ctx, store.RunFinish{ID: r2.ID, State: api.RunExited, Signal: 9, Error: "killed", At: end}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetRun(ctx, r2.ID)
	if got.State != api.RunExited || got.ExitCode != nil || got.Signal != 9 || got.Error != "killed" {
		t.Fatalf("signalled run = %+v", got)
	}
	running, err = s.RunningRuns(ctx, a.ID)
	if err != nil || !slices.Equal(runIDs(running), []string{r3.ID}) {
		t.Fatalf("RunningRuns after finishing two = %v, %v; want [run-c]", runIDs(running), err)
	}
	if running, _ = s.RunningRuns(ctx, a2.ID); !slices.Equal(runIDs(running), []string{"run-other"}) {
		t.Fatalf("RunningRuns(other allocation) = %v", runIDs(running))
	}
	if list, _ = s.ListRuns(ctx, w.ID); !slices.Equal(runIDs(list), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("finished runs left the list: %v", runIDs(list))
	}
	if list, err = s.ListRuns(ctx, "ws_none"); err != nil || len(list) != 0 {
		t.Fatalf("runs of an unknown workspace: %v, %v", runIDs(list), err)
	}
	if running, err = s.RunningRuns(ctx, "al_none"); err != nil || len(running) != 0 {
		t.Fatalf("running runs of an unknown allocation: %v, %v", runIDs(running), err)
	}
}

func testRunOutput(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "provisioned", base)
	r := api.Run{ID: "run-prov", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"sh", "-c", "make deps"},
		State: api.RunRunning, StartedAt: base}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	plain := api.Run{ID: "run-plain", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"true"}, State: api.RunRunning, StartedAt: base.Add(time.Second)}
	if err := s.CreateRun(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Kind != "" || got.Output != "" {
		t.Fatalf("a new run has kind %q, output %q", got.Kind, got.Output)
	}
	out := strings.Repeat("compiling…\n", 64<<10/12) + "done\n"
	if err := s.SetRunOutput(ctx, r.ID, "provision", out); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.Kind != "provision" || got.Output != out || !slices.Equal(got.Argv, r.Argv) || got.State != api.RunRunning {
		t.Fatalf("run after SetRunOutput: kind %q, %d bytes of output (%v); want provision, %d bytes", got.Kind, len(got.Output), err, len(out))
	}
	list, err := s.ListRuns(ctx, w.ID)
	if err != nil || len(list) != 2 || list[0].Kind != "provision" || list[0].Output != out || list[1].Kind != "" || list[1].Output != "" {
		t.Fatalf("ListRuns after SetRunOutput: %v, %v", runIDs(list), err)
	}
	// Finishing keeps the output; a later call replaces it.
	if err := s.FinishRun(ctx, store.RunFinish{ID: r.ID, State: api.RunExited, ExitCode: ptr(0), At: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Output != out {
		t.Fatal("FinishRun lost the output")
	}
	if err := s.SetRunOutput(ctx, r.ID, "teardown", "bye\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Kind != "teardown" || got.Output != "bye\n" || got.State != api.RunExited {
		t.Fatalf("after a second SetRunOutput: %+v", got)
	}
	// A tail cut inside a character, or binary output, is still kept (as valid UTF-8).
	raw := "\xa6 tail\x00cut\xff\n" + "é"[:1]
	if err := s.SetRunOutput(ctx, r.ID, "provision", raw); err != nil {
		t.Fatalf("output that is not UTF-8: %v", err)
	}
	got, _ = s.GetRun(ctx, r.ID)
	if !utf8.ValidString(got.Output) || strings.ContainsRune(got.Output, 0) || !strings.Contains(got.Output, " tail") ||
		!strings.Contains(got.Output, "cut") {
		t.Fatalf("output that is not UTF-8 came back as %q", got.Output)
	}
	wantCode(t, "output of a missing run", s.SetRunOutput(ctx, "run_missing", "provision", "x"), protocol.CodeNotFound)
}

// testRunKeys: an idempotency key names one run per workspace; another workspace may reuse it,
// and runs without a key never collide.
func testRunKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "keyed", base)
	w2, a2 := create(t, s, "keyed2", base)
	mk := func(id string, ws api.Workspace, alloc, key string) error {
		return s.CreateRun(ctx, api.Run{ID: id, WorkspaceID: ws.ID, AllocationID: alloc, Argv: []string{"true"},
			State: api.RunRunning, StartedAt: base, IdempotencyKey: key})
	}
	if err := mk("run-k1", w, a.ID, "k"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "a second run with the key", mk("run-k2", w, a.ID, "k"), protocol.CodeExists)
	if err := mk("run-k3", w2, a2.ID, "k"); err != nil {
		t.Fatalf("the key in another workspace: %v", err)
	}
	for _, id := range []string{"run-n1", "run-n2"} {
		if err := mk(id, w, a.ID, ""); err != nil {
			t.Fatalf("a run without a key: %v", err)
		}
	}
	got, err := s.RunByIdempotencyKey(ctx, w.ID, "k")
	if err != nil || got.ID != "run-k1" || got.IdempotencyKey != "k" {
		t.Fatalf("RunByIdempotencyKey = %+v, %v; want run-k1", got, err)
	}
	if got, _ := s.GetRun(ctx, "run-n1"); got.IdempotencyKey != "" {
		t.Fatalf("a run without a key reads back key %q", got.IdempotencyKey)
	}
	if _, err := s.GetRun(ctx, "run-k2"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("the refused run was recorded: %v", err)
	}
	_, err = s.RunByIdempotencyKey(ctx, w.ID, "other")
	wantCode(t, "an unknown key", err, protocol.CodeNotFound)
}
