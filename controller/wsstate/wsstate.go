// Package wsstate is the workspace state machine: the one table of the transitions a workspace
// may make between its states (api.WorkspaceState), named by the event that makes each.
//
// The store's TransitionWorkspace is the only way a workspace's state changes, and it takes an
// Event, not a state: it applies the event's transition only when the workspace is in one of the
// event's from states, read and written in one transaction under a guard on that same state, so
// racing transitions from one state have exactly one winner and a refused one changes nothing.
// A workspace is recorded in Initial.
//
//	event            from                                      to
//	finish-provision provisioning                              ready
//	fail-provision   provisioning                              failed
//	start-close      ready                                     closing
//	refuse-close     closing                                   ready
//	finish-close     closing                                   closed
//	start-reopen     closed                                    reopening
//	finish-reopen    reopening                                 ready
//	fail-reopen      reopening                                 closed
//	start-reclaim    closed                                    reclaiming
//	finish-reclaim   reclaiming                                closed
//	start-stop       ready                                     stopping
//	refuse-stop      stopping                                  ready
//	finish-stop      stopping                                  stopped
//	start-start      stopped                                   starting
//	finish-start     starting                                  ready
//	fail-start       starting                                  stopped
//	lose             ready stopped                             lost
//	start-recover    lost                                      recovering
//	finish-recover   recovering                                ready
//	fail-recover     recovering                                lost
//	delete           every state but deleted                   deleted
//
// Lost is a workspace whose sandbox its provider reported gone, destroyed outside Tether, while
// its work since the last receipt was not saved: only a recover (from a receipt, a decision an
// operator records) or a delete leaves it. Lose leaves stopped too: a stopped workspace's kept
// sandbox can be destroyed outside Tether just the same, with the unsaved work it kept.
//
// Deleted is the only terminal state. Something that happens to a workspace without changing its
// state (a refused runner, a failed teardown) is an event of the store's RecordEvent, not a
// transition.
package wsstate

import (
	"slices"

	"github.com/tetherhq/tether/controller/api"
)

// State is a workspace's state.
type State = api.WorkspaceState

// Initial is the state a workspace is created in.
const Initial = api.StateProvisioning

// Event names a transition of the table.
type Event string

// The events, one per row of the table.
const (
	// FinishProvision: the runner connected, answered a probe and any checkout and provision
	// commands succeeded.
	FinishProvision Event = "finish-provision"
	// FailProvision: the allocation, the checkout or a provision command failed.
	FailProvision Event = "fail-provision"
	// StartClose: a close began (it quiesces, saves and releases next).
	StartClose Event = "start-close"
	// RefuseClose: a close could not save or release; the workspace stays as it was.
	RefuseClose Event = "refuse-close"
	// FinishClose: the work is saved and verified, the sandbox released, the writers fenced.
	FinishClose Event = "finish-close"
	// StartReopen: a reopen claimed the closed workspace (one of any racing reopens or sweeps).
	StartReopen Event = "start-reopen"
	// FinishReopen: the last receipt was restored onto the new allocation.
	FinishReopen Event = "finish-reopen"
	// FailReopen: the reopen failed; its allocation is released and the workspace closed again.
	FailReopen Event = "fail-reopen"
	// StartReclaim: a gc sweep claimed the closed workspace to remove superseded receipts.
	StartReclaim Event = "start-reclaim"
	// FinishReclaim: the sweep (or the next one, or a reopen) finished the reclaim.
	FinishReclaim Event = "finish-reclaim"
	// StartStop: a stop began (it ends runs and services, then has the provider stop the sandbox).
	StartStop Event = "start-stop"
	// RefuseStop: the provider could not stop the sandbox, or did not keep it (a fresh Inspect
	// found it neither stopped nor archived); the workspace is ready again.
	RefuseStop Event = "refuse-stop"
	// FinishStop: the sandbox is stopped and kept, its allocation with it; no capture, no release.
	FinishStop Event = "finish-stop"
	// StartStart: a start claimed the stopped workspace and has the provider start its sandbox.
	StartStart Event = "start-start"
	// FinishStart: the runner of the kept sandbox connected and answered a probe; a new writer
	// epoch began.
	FinishStart Event = "finish-start"
	// FailStart: the provider could not start the sandbox, or its runner did not connect by the
	// ready deadline; the sandbox is stopped again and the workspace stopped, with the reason.
	FailStart Event = "fail-start"
	// Lose: the provider, asked afresh, reported the sandbox gone while no runner was connected;
	// the work since the last receipt is lost and the active runs failed.
	Lose Event = "lose"
	// StartRecover: a recover claimed the lost workspace (one of any racing recovers).
	StartRecover Event = "start-recover"
	// FinishRecover: the chosen receipt (or, asked for explicitly, an empty tree) was restored
	// onto a fresh allocation.
	FinishRecover Event = "finish-recover"
	// FailRecover: the recover failed; its allocation is released and the workspace lost again.
	FailRecover Event = "fail-recover"
	// Delete: workspace rm, from any state but deleted.
	Delete Event = "delete"
)

// Transition is one row of the table: Event moves a workspace in any of From to To.
type Transition struct {
	Event Event
	From  []State
	To    State
}

// states lists every state, in the order a workspace usually meets them.
var states = []State{api.StateProvisioning, api.StateReady, api.StateFailed, api.StateClosing, api.StateClosed,
	api.StateReopening, api.StateReclaiming, api.StateStopping, api.StateStopped, api.StateStarting, api.StateLost, api.StateRecovering,
	api.StateDeleted}

// table is the state machine. Every change of a workspace's state is one of its rows.
var table = []Transition{
	{FinishProvision, []State{api.StateProvisioning}, api.StateReady},
	{FailProvision, []State{api.StateProvisioning}, api.StateFailed},
	{StartClose, []State{api.StateReady}, api.StateClosing},
	{RefuseClose, []State{api.StateClosing}, api.StateReady},
	{FinishClose, []State{api.StateClosing}, api.StateClosed},
	{StartReopen, []State{api.StateClosed}, api.StateReopening},
	{FinishReopen, []State{api.StateReopening}, api.StateReady},
	{FailReopen, []State{api.StateReopening}, api.StateClosed},
	{StartReclaim, []State{api.StateClosed}, api.StateReclaiming},
	{FinishReclaim, []State{api.StateReclaiming}, api.StateClosed},
	{StartStop, []State{api.StateReady}, api.StateStopping},
	{RefuseStop, []State{api.StateStopping}, api.StateReady},
	{FinishStop, []State{api.StateStopping}, api.StateStopped},
	{StartStart, []State{api.StateStopped}, api.StateStarting},
	{FinishStart, []State{api.StateStarting}, api.StateReady},
	{FailStart, []State{api.StateStarting}, api.StateStopped},
	// A stopped sandbox destroyed outside Tether took the unsaved work it kept with it.
	{Lose, []State{api.StateReady, api.StateStopped}, api.StateLost},
	{StartRecover, []State{api.StateLost}, api.StateRecovering},
	{FinishRecover, []State{api.StateRecovering}, api.StateReady},
	{FailRecover, []State{api.StateRecovering}, api.StateLost},
	{Delete, []State{api.StateProvisioning, api.StateReady, api.StateFailed, api.StateClosing, api.StateClosed,
		api.StateReopening, api.StateReclaiming, api.StateStopping, api.StateStopped, api.StateStarting,
		api.StateLost, api.StateRecovering}, api.StateDeleted},
}

// States returns every workspace state.
func States() []State { return slices.Clone(states) }

// Known reports whether s is a workspace state.
func Known(s State) bool { return slices.Contains(states, s) }

// Table returns the transitions, one per event.
func Table() []Transition {
	out := make([]Transition, len(table))
	for i, t := range table {
		out[i] = Transition{Event: t.Event, From: slices.Clone(t.From), To: t.To}
	}
	return out
}

// Lookup returns the transition of ev.
func Lookup(ev Event) (Transition, bool) {
	for _, t := range table {
		if t.Event == ev {
			return Transition{Event: t.Event, From: slices.Clone(t.From), To: t.To}, true
		}
	}
	return Transition{}, false
}

// Allows reports whether the transition leaves from.
func (t Transition) Allows(from State) bool { return slices.Contains(t.From, from) }

// Allowed reports whether some event moves a workspace from from to to.
func Allowed(from, to State) bool {
	for _, t := range table {
		if t.To == to && t.Allows(from) {
			return true
		}
	}
	return false
}

// Next returns the states a workspace in from may move to, in table order.
func Next(from State) []State {
	var out []State
	for _, t := range table {
		if t.Allows(from) && !slices.Contains(out, t.To) {
			out = append(out, t.To)
		}
	}
	return out
}

// Terminal reports whether no transition leaves s.
func Terminal(s State) bool { return len(Next(s)) == 0 }

// Path returns a shortest sequence of events that takes a workspace from from to to (empty when
// they are equal), and false when the table has none.
func Path(from, to State) ([]Event, bool) {
	type step struct {
		prev State
		ev   Event
	}
	seen := map[State]step{from: {}}
	queue := []State{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var evs []Event
			for s := to; s != from; s = seen[s].prev {
				evs = append(evs, seen[s].ev)
			}
			slices.Reverse(evs)
			return evs, true
		}
		for _, t := range table {
			if _, ok := seen[t.To]; ok || !t.Allows(cur) {
				continue
			}
			seen[t.To] = step{prev: cur, ev: t.Event}
			queue = append(queue, t.To)
		}
	}
	return nil, false
}
