package protocol

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// The list of operations is well formed: every name once, a known direction, fencing only where
// the runner serves, and the hello the runner opens with.
func TestOpsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Ops() {
		if s.Name == "" || seen[s.Name] {
			t.Errorf("operation %q: empty or listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Direction != ControllerToRunner && s.Direction != RunnerToController {
			t.Errorf("%s: direction %v", s.Name, s.Direction)
		}
		if s.Fenced() && s.Direction != ControllerToRunner {
			t.Errorf("%s: fenced, but the runner does not serve it (%v)", s.Name, s.Direction)
		}
		if got, ok := LookupOp(s.Name); !ok || !reflect.DeepEqual(got, s) {
			t.Errorf("LookupOp(%q) = %+v, %v; want %+v", s.Name, got, ok, s)
		}
	}
	if s, ok := LookupOp(OpHello); !ok || s.Direction != RunnerToController {
		t.Errorf("%s: %+v, %v; want a runner→controller operation", OpHello, s, ok)
	}
	if _, ok := LookupOp("no_such_op"); ok {
		t.Error("LookupOp found an operation that is not listed")
	}
	if s, _ := LookupOp(OpSetEpoch); !s.Fenced() || s.Mutating {
		t.Errorf("%s: %+v; want fenced, not mutating", OpSetEpoch, s)
	}
}

// Every operation's arguments decode from an empty object: each Args is a struct type whose zero
// value is what a header without arguments gives its handler.
func TestOpArgsDecodeFromEmptyObject(t *testing.T) {
	for _, s := range Ops() {
		if s.Args == nil {
			continue
		}
		if s.Args.Kind() != reflect.Struct {
			t.Errorf("%s: arguments of kind %v; want a struct", s.Name, s.Args.Kind())
			continue
		}
		v := reflect.New(s.Args)
		if err := json.Unmarshal([]byte(`{}`), v.Interface()); err != nil {
			t.Errorf("%s: %v does not decode from {}: %v", s.Name, s.Args, err)
		} else if !v.Elem().IsZero() {
			t.Errorf("%s: %v decoded from {} is not its zero value", s.Name, s.Args)
		}
	}
}

// Mutating and RunnerCapabilities are read off the list (the capabilities also name the
// runner's features), and cannot change it.
func TestDerivedFromOps(t *testing.T) {
	var caps []string
	for _, s := range Ops() {
		if Mutating(s.Name) != s.Mutating {
			t.Errorf("Mutating(%q) = %v; the list says %v", s.Name, Mutating(s.Name), s.Mutating)
		}
		if s.Direction == ControllerToRunner {
			caps = append(caps, s.Name)
		}
	}
	if Mutating("no_such_op") {
		t.Error("an unknown operation is mutating")
	}
	caps = append(caps, CapWriteSHA256Trailer) // the features beyond the ops, last
	got := RunnerCapabilities()
	if !slices.Equal(got, caps) {
		t.Errorf("RunnerCapabilities() = %v; want %v", got, caps)
	}
	got[0] = "changed"
	ops := Ops()
	ops[0].Name, ops[0].Mutating = "changed", !ops[0].Mutating
	if RunnerCapabilities()[0] == "changed" || Ops()[0].Name == "changed" {
		t.Error("a caller changed the list of operations")
	}
	if s, ok := LookupOp(OpExec); !ok || !s.Mutating {
		t.Errorf("LookupOp(%q) = %+v, %v after a caller changed its copy", OpExec, s, ok)
	}
}
