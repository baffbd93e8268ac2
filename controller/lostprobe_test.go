package controller

import (
	"testing"
	"time"
)

// A sandbox is confirmed gone only by lostConfirmations gone answers in a row, lostProbeGap
// apart: one glitch, or an error between gone answers, confirms nothing.
func TestLostNeedsConfirmedGoneAnswers(t *testing.T) {
	var p lostProbes
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ask := func(gone bool) bool {
		t.Helper()
		if !p.due("al_1", now) {
			t.Fatalf("al_1 not due at %s", now)
		}
		confirmed := p.answer("al_1", gone, now)
		if !confirmed && p.due("al_1", now.Add(lostProbeGap-time.Millisecond)) {
			t.Fatal("asked again before the gap")
		}
		now = now.Add(lostProbeGap)
		return confirmed
	}
	for i := 1; i < lostConfirmations; i++ {
		if ask(true) {
			t.Fatalf("gone confirmed after %d answer(s)", i)
		}
	}
	if ask(false) {
		t.Fatal("a live answer confirmed a loss")
	}
	for i := 1; i < lostConfirmations; i++ {
		if ask(true) {
			t.Fatalf("gone confirmed after %d answer(s) following a live one", i)
		}
	}
	p.unknown("al_1", now)
	now = now.Add(lostProbeGap)
	for i := 1; i < lostConfirmations; i++ {
		if ask(true) {
			t.Fatalf("gone confirmed after %d answer(s) following an error", i)
		}
	}
	if !ask(true) {
		t.Fatalf("%d gone answers in a row, %s apart, did not confirm the loss", lostConfirmations, lostProbeGap)
	}
	if !p.due("al_1", now) {
		t.Fatal("a confirmed loss is remembered")
	}
}

// Gone answers further apart than lostRowGap (the allocation was not asked meanwhile: its runner
// came back, its workspace moved on) are not in a row: two old ones and a new one confirm nothing.
func TestLostGoneAnswersApartAreNotInARow(t *testing.T) {
	var p lostProbes
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for i := 1; i < lostConfirmations; i++ {
		if p.answer("al_1", true, now) {
			t.Fatalf("confirmed after %d", i)
		}
		now = now.Add(lostProbeGap)
	}
	now = now.Add(lostRowGap)
	if p.answer("al_1", true, now) {
		t.Fatal("gone answers hours apart confirmed a loss")
	}
	p.prune(now.Add(lostForget + time.Second))
	if len(p.m) != 0 {
		t.Fatalf("prune kept %d stale entries", len(p.m))
	}
}
