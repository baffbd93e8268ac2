package provider

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorStatusRoundTrip(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		in       error
		wantCode string
		wantMsg  string
	}{
		{Errorf(CodeNotFound, "allocation %s", "a1"), CodeNotFound, "allocation a1"},
		{fmt.Errorf("create: %w", Errorf(CodePathEscape, "../x")), CodePathEscape, "create: ../x"},
		{errors.New("disk on fire"), CodeProviderFailed, "disk on fire"},
	}
	for _, tc := range cases {
		got := fromStatus(ctx, "Test", toStatus(tc.in))
		var pe *Error
		if !errors.As(got, &pe) {
			t.Fatalf("%v: got %T %v, want *Error", tc.in, got, got)
		}
		if pe.Code != tc.wantCode || pe.Message != tc.wantMsg {
			t.Errorf("%v: got {%s %q}, want {%s %q}", tc.in, pe.Code, pe.Message, tc.wantCode, tc.wantMsg)
		}
	}
	if !errors.Is(Errorf(CodeNotFound, "x"), &Error{Code: CodeNotFound}) {
		t.Error("errors.Is does not match on code")
	}
	if ErrorCode(fmt.Errorf("wrap: %w", Errorf(CodeConflict, "y"))) != CodeConflict {
		t.Error("ErrorCode does not see through wrapping")
	}
}

func TestCanceledRoundTrip(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := fromStatus(ctx, "Test", toStatus(fmt.Errorf("stop: %w", context.Canceled)))
	if !errors.Is(got, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", got)
	}
}
