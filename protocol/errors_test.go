package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// foreignError is another package's typed error: it prints its code first, like plugin errors.
type foreignError struct{ code, msg string }

func (e *foreignError) Error() string     { return e.code + ": " + e.msg }
func (e *foreignError) ErrorCode() string { return e.code }

func TestCodeOf(t *testing.T) {
	typed := Errorf(CodeStaleEpoch, "epoch %d is older than %d", 3, 4)
	cases := []struct {
		name string
		err  error
		want Code
	}{
		{"typed", typed, CodeStaleEpoch},
		{"wrapped once", fmt.Errorf("write file: %w", typed), CodeStaleEpoch},
		{"wrapped twice", fmt.Errorf("op: %w", fmt.Errorf("write file: %w", typed)), CodeStaleEpoch},
		{"joined", errors.Join(errors.New("cleanup failed"), typed), CodeStaleEpoch},
		{"foreign", &foreignError{"path_escape", "../x"}, CodePathEscape},
		{"foreign wrapped", fmt.Errorf("import: %w", &foreignError{"symlink_refused", "a/b"}), CodeSymlinkRefused},
		{"plain", errors.New("boom"), CodeInternal},
		{"plain wrapped", fmt.Errorf("x: %w", errors.New("boom")), CodeInternal},
	}
	for _, c := range cases {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("%s: CodeOf(%v) = %s; want %s", c.name, c.err, got, c.want)
		}
	}
}

func TestAsError(t *testing.T) {
	if AsError(nil) != nil {
		t.Fatal("AsError(nil) != nil")
	}
	typed := Errorf(CodeNotFound, "run %q not found", "r1")
	if got := AsError(fmt.Errorf("finish: %w", typed)); got.Code != CodeNotFound {
		t.Fatalf("wrapped typed error lost its code: %+v", got)
	}

	// A foreign error keeps its code and its code is not printed twice.
	got := AsError(&foreignError{"not_found", "workspace w1 not found"})
	if got.Code != CodeNotFound || got.Message != "workspace w1 not found" {
		t.Fatalf("foreign error = %+v", got)
	}
	if got.Error() != "not_found: workspace w1 not found" {
		t.Fatalf("foreign error prints %q", got.Error())
	}
	// Wrapped, the context stays in the message and the code survives.
	got = AsError(fmt.Errorf("create: %w", &foreignError{"provider_failed", "docker down"}))
	if got.Code != CodeProviderFailed || got.Message != "create: provider_failed: docker down" {
		t.Fatalf("wrapped foreign error = %+v", got)
	}
	// A message that merely starts like another code is left alone.
	got = AsError(errors.New("not_found: but untyped"))
	if got.Code != CodeInternal || got.Message != "not_found: but untyped" {
		t.Fatalf("untyped error = %+v", got)
	}

	// The wire form carries the code and message separately.
	b, err := json.Marshal(AsError(&foreignError{"revoked", "allocation gone"}))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"code":"revoked","message":"allocation gone"}` {
		t.Fatalf("wire form %s", b)
	}
}

func TestExitCodesDistinct(t *testing.T) {
	seen := map[int]Code{}
	for c, n := range exitCodes {
		if n <= 1 || n >= 126 && !(c == CodeCanceled && n == 130) {
			t.Errorf("%s exits %d: 0 and 1 are success and plain failure, 126+ look like shell errors", c, n)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s share exit code %d", c, other, n)
		}
		seen[n] = c
		if c.ExitCode() != n {
			t.Errorf("%s.ExitCode() = %d; want %d", c, c.ExitCode(), n)
		}
	}
	for _, c := range []Code{CodeInvalidArgument, CodeNotFound, CodeExists, CodeConflict, CodePathEscape,
		CodeSymlinkRefused, CodeNotDirectory, CodeStaleEpoch, CodeChangedDuringCapture, CodeRevoked,
		CodeUnauthorized, CodeUnsupported, CodeUnavailable, CodeTimeout, CodeCanceled,
		CodeFailed, CodeProviderFailed, CodeInternal} {
		if _, ok := exitCodes[c]; !ok {
			t.Errorf("%s has no exit code", c)
		}
	}
	if Code("made_up").ExitCode() != 1 {
		t.Error("unknown code should exit 1")
	}
}
