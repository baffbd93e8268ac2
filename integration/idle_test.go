package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// A closed workspace refuses exec and file writes with how to reopen it; --wake reopens it
// (from its saved copy, on a new allocation) and does the call. The idle policy is set and
// shown, and bad policies are refused.
func TestWakeClosedWorkspace(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "sleepy", "--idle-close", "1h")
	if ws.Idle == nil || ws.Idle.Action != api.IdleClose || time.Duration(ws.Idle.After) != time.Hour || ws.IdlePolicy == nil {
		t.Fatalf("created with --idle-close 1h: in force %+v, own %+v", ws.Idle, ws.IdlePolicy)
	}
	c.mustCLI(t, "exec", "sleepy", "--", "sh", "-c", "echo one > a.txt")
	if got := c.showWorkspace(t, "sleepy"); got.LastActivityAt == nil {
		t.Fatalf("no last activity after an exec: %+v", got)
	}
	c.mustCLI(t, "workspace", "close", "sleepy")

	r := c.cli(t, nil, "exec", "sleepy", "--", "cat", "a.txt")
	if r.Code != 5 || !strings.Contains(r.Stderr, "tether workspace reopen "+ws.ID) || !strings.Contains(r.Stderr, "--wake") {
		t.Fatalf("exec on a closed workspace: %+v", r)
	}
	r = c.cli(t, strings.NewReader("two\n"), "files", "put", "sleepy", "-", "b.txt")
	if r.Code != 5 || !strings.Contains(r.Stderr, "--wake") {
		t.Fatalf("files put on a closed workspace: %+v", r)
	}
	if got := c.showWorkspace(t, "sleepy"); got.State != api.StateClosed {
		t.Fatalf("refused calls changed the workspace: %s", got.State)
	}

	if out := c.mustCLI(t, "exec", "sleepy", "--wake", "--", "cat", "a.txt"); out != "one\n" {
		t.Fatalf("exec --wake printed %q; want the saved file", out)
	}
	woken := c.showWorkspace(t, "sleepy")
	if woken.State != api.StateReady || woken.AllocationID == ws.AllocationID {
		t.Fatalf("after exec --wake: %+v", woken)
	}
	evs, err := c.Client(t).ListEvents(context.Background(), ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || strings.HasPrefix(e.Cause, "wake: reopening")
	}
	if !found {
		t.Fatalf("no wake event in %+v", evs)
	}

	c.mustCLI(t, "workspace", "update", "sleepy", "--idle-off")
	if got := c.showWorkspace(t, "sleepy"); got.Idle != nil || got.IdlePolicy == nil || got.IdlePolicy.Action != api.IdleOff {
		t.Fatalf("after --idle-off: in force %+v, own %+v", got.Idle, got.IdlePolicy)
	}
	for _, bad := range [][]string{
		{"workspace", "update", "sleepy", "--idle-stop", "1h", "--idle-close", "1h"},
		{"workspace", "update", "sleepy", "--idle-close", "10s"},
		{"workspace", "create", "--name", "both", "--idle-stop", "1h", "--idle-close", "1h"},
	} {
		if r := c.cli(t, nil, bad...); r.Code != 2 || !strings.Contains(r.Stderr, "invalid_argument") {
			t.Fatalf("%v: %+v; want invalid_argument", bad, r)
		}
	}
}
