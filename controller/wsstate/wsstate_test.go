package wsstate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// TestTableIsWhatTheControllerDoes pins the table, from → to by event, to the transitions the
// controller makes (see the callers of the store's TransitionWorkspace): a change to the table
// is a change of behaviour, made here on purpose.
func TestTableIsWhatTheControllerDoes(t *testing.T) {
	want := []string{
		"finish-provision: provisioning → ready", // CreateWorkspace: the runner answered
		"fail-provision: provisioning → failed",  // CreateWorkspace: allocation, checkout or provision failed
		"start-close: ready → closing",           // CloseWorkspace
		"refuse-close: closing → ready",          // CloseWorkspace: quiesce, save or release failed
		"finish-close: closing → closed",         // CloseWorkspace: saved, released, fenced
		"start-reopen: closed → reopening",       // ReopenWorkspace (races a sweep or another reopen)
		"finish-reopen: reopening → ready",       // ReopenWorkspace: restored
		"fail-reopen: reopening → closed",        // ReopenWorkspace: failed, allocation released
		"start-reclaim: closed → reclaiming",     // GC
		"finish-reclaim: reclaiming → closed",    // GC, the next GC or a reopen finishing it
		"start-stop: ready → stopping",           // StopWorkspace
		"refuse-stop: stopping → ready",          // StopWorkspace: the provider did not stop or keep the sandbox
		"finish-stop: stopping → stopped",        // StopWorkspace: stopped, retention confirmed by Inspect
		"start-start: stopped → starting",        // StartWorkspace
		"finish-start: starting → ready",         // StartWorkspace: the runner connected and answered a probe
		"fail-start: starting → stopped",         // StartWorkspace, or the upkeep past the ready deadline
		"lose: ready stopped → lost",             // upkeep: provider says gone, no runner
		"start-recover: lost → recovering",       // RecoverWorkspace (races another recover)
		"finish-recover: recovering → ready",     // RecoverWorkspace: restored on a fresh allocation
		"fail-recover: recovering → lost",        // RecoverWorkspace: failed, allocation released
		// DeleteWorkspace, from any state but deleted
		"delete: provisioning ready failed closing closed reopening reclaiming stopping stopped starting lost recovering → deleted",
	}
	var got []string
	for _, tr := range Table() {
		from := make([]string, len(tr.From))
		for i, f := range tr.From {
			from[i] = string(f)
		}
		got = append(got, fmt.Sprintf("%s: %s → %s", tr.Event, strings.Join(from, " "), tr.To))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("table:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTableIsWellFormed(t *testing.T) {
	if !Known(Initial) {
		t.Fatalf("initial state %s is not a state", Initial)
	}
	events := map[Event]bool{}
	for _, tr := range Table() {
		if tr.Event == "" || events[tr.Event] {
			t.Fatalf("event %q is empty or named twice", tr.Event)
		}
		events[tr.Event] = true
		if len(tr.From) == 0 || !Known(tr.To) {
			t.Fatalf("%s: from %v to %q", tr.Event, tr.From, tr.To)
		}
		for i, f := range tr.From {
			if !Known(f) || f == tr.To || slices.Contains(tr.From[:i], f) {
				t.Fatalf("%s: from state %q is unknown, repeated or its own destination", tr.Event, f)
			}
		}
		if got, ok := Lookup(tr.Event); !ok || got.To != tr.To || !slices.Equal(got.From, tr.From) {
			t.Fatalf("Lookup(%s) = %+v, %v", tr.Event, got, ok)
		}
	}
	if _, ok := Lookup("resurrect"); ok {
		t.Fatal("Lookup found an event the table does not have")
	}
	// Every state of the API is one of the machine's, and no other.
	all := []api.WorkspaceState{api.StateProvisioning, api.StateReady, api.StateFailed, api.StateClosing,
		api.StateClosed, api.StateReopening, api.StateDeleted, api.StateReclaiming, api.StateStopping, api.StateStopped,
		api.StateStarting, api.StateLost, api.StateRecovering}
	if got := States(); len(got) != len(all) {
		t.Fatalf("States() = %v; want %v", got, all)
	}
	for _, s := range all {
		if !Known(s) {
			t.Fatalf("state %s is not in the machine", s)
		}
	}
	if Known("limbo") {
		t.Fatal("an unknown state is known")
	}
}

func TestReachability(t *testing.T) {
	for _, s := range States() {
		// Every state is reachable from the initial one, and the walk found is made of
		// transitions the table allows.
		path, ok := Path(Initial, s)
		if !ok {
			t.Fatalf("%s is unreachable from %s", s, Initial)
		}
		cur := Initial
		for _, ev := range path {
			tr, _ := Lookup(ev)
			if !tr.Allows(cur) || !Allowed(cur, tr.To) {
				t.Fatalf("path to %s: %s does not leave %s", s, ev, cur)
			}
			cur = tr.To
		}
		if cur != s {
			t.Fatalf("path %v ends in %s, not %s", path, cur, s)
		}
		// Every workspace can be deleted, directly, unless it is already.
		if s != api.StateDeleted && !Allowed(s, api.StateDeleted) {
			t.Fatalf("a %s workspace cannot be deleted", s)
		}
		// Deleted is the only terminal state; every other one can get back to ready or is failed
		// (which only delete leaves).
		if Terminal(s) != (s == api.StateDeleted) {
			t.Fatalf("Terminal(%s) = %v", s, Terminal(s))
		}
		_, toReady := Path(s, api.StateReady)
		if toReady != (s != api.StateDeleted && s != api.StateFailed) {
			t.Fatalf("%s: back to ready = %v", s, toReady)
		}
	}
	if got := Next(api.StateFailed); !slices.Equal(got, []State{api.StateDeleted}) {
		t.Fatalf("Next(failed) = %v; want only deleted", got)
	}
	if got := Next(api.StateClosed); !slices.Equal(got, []State{api.StateReopening, api.StateReclaiming, api.StateDeleted}) {
		t.Fatalf("Next(closed) = %v", got)
	}
	// No state moves to itself: something that happens without a change of state is recorded
	// as an event (the store's RecordEvent), not made a transition.
	for _, s := range States() {
		if Allowed(s, s) {
			t.Fatalf("%s → %s is allowed", s, s)
		}
	}
	// Nothing brings a workspace back from deleted, nor makes a failed one ready.
	for _, s := range States() {
		if Allowed(api.StateDeleted, s) || Allowed(api.StateFailed, s) && s != api.StateDeleted {
			t.Fatalf("deleted or failed → %s is allowed", s)
		}
	}
	// A lost workspace leaves only by a recover (which may fail back to lost) or a delete: its
	// loss is never undone by anything that would pretend nothing was lost (a reopen, a close).
	if got := Next(api.StateLost); !slices.Equal(got, []State{api.StateRecovering, api.StateDeleted}) {
		t.Fatalf("Next(lost) = %v; want recovering, deleted", got)
	}
	if got := Next(api.StateRecovering); !slices.Equal(got, []State{api.StateReady, api.StateLost, api.StateDeleted}) {
		t.Fatalf("Next(recovering) = %v; want ready, lost, deleted", got)
	}
	if p, ok := Path(api.StateLost, api.StateReady); !ok || !slices.Equal(p, []Event{StartRecover, FinishRecover}) {
		t.Fatalf("Path(lost, ready) = %v, %v", p, ok)
	}
	for _, s := range []State{api.StateClosed, api.StateReopening, api.StateClosing, api.StateProvisioning, api.StateFailed,
		api.StateStopping, api.StateStarting} {
		if Allowed(s, api.StateLost) {
			t.Fatalf("%s → lost is allowed: only a ready or stopped workspace (with a sandbox to lose) is lost", s)
		}
	}
	if p, ok := Path(api.StateClosed, api.StateClosed); !ok || len(p) != 0 {
		t.Fatalf("Path(closed, closed) = %v, %v", p, ok)
	}
}

// TestStopStart pins what the stop and start events allow: a stopped workspace keeps its
// sandbox and comes back only through start (never reopen or close directly), a failed start
// leaves it stopped, and a refused stop leaves it ready.
func TestStopStart(t *testing.T) {
	// A stopped workspace's kept sandbox can be destroyed outside Tether: lost.
	if got := Next(api.StateStopped); !slices.Equal(got, []State{api.StateStarting, api.StateLost, api.StateDeleted}) {
		t.Fatalf("Next(stopped) = %v; want starting, lost, deleted", got)
	}
	if got := Next(api.StateStopping); !slices.Equal(got, []State{api.StateReady, api.StateStopped, api.StateDeleted}) {
		t.Fatalf("Next(stopping) = %v", got)
	}
	if got := Next(api.StateStarting); !slices.Equal(got, []State{api.StateReady, api.StateStopped, api.StateDeleted}) {
		t.Fatalf("Next(starting) = %v", got)
	}
	path, ok := Path(api.StateReady, api.StateReady)
	if !ok || len(path) != 0 {
		t.Fatalf("Path(ready, ready) = %v", path)
	}
	path, ok = Path(api.StateStopped, api.StateReady)
	if !ok || !slices.Equal(path, []Event{StartStart, FinishStart}) {
		t.Fatalf("Path(stopped, ready) = %v, %v", path, ok)
	}
	// Only a ready workspace stops; only a stopped one starts.
	for _, s := range States() {
		if tr, _ := Lookup(StartStop); tr.Allows(s) != (s == api.StateReady) {
			t.Fatalf("start-stop from %s: %v", s, tr.Allows(s))
		}
		if tr, _ := Lookup(StartStart); tr.Allows(s) != (s == api.StateStopped) {
			t.Fatalf("start-start from %s: %v", s, tr.Allows(s))
		}
	}
	// A stopped workspace is neither closed nor reopened without being started first.
	for _, to := range []State{api.StateClosing, api.StateReopening, api.StateClosed} {
		if Allowed(api.StateStopped, to) {
			t.Fatalf("stopped → %s is allowed", to)
		}
	}
}
