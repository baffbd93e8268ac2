package controller

import (
	"strings"
	"testing"
)

func TestRequestID(t *testing.T) {
	for _, ok := range []string{"a", "tether-test.42", "0f8fad5b-d9cb-469f-a165-70867728950e", "trace:1_2", strings.Repeat("x", maxRequestID)} {
		if got := requestID(ok); got != ok {
			t.Errorf("requestID(%q) = %q, want it kept", ok, got)
		}
	}
	for _, bad := range []string{"", "two words", "a\nb", "x\"y", "é", strings.Repeat("x", maxRequestID+1), "a/b"} {
		got := requestID(bad)
		if got == bad || !strings.HasPrefix(got, "req_") || len(got) != len("req_")+24 {
			t.Errorf("requestID(%q) = %q, want a new one", bad, got)
		}
	}
	if a, b := requestID(""), requestID(""); a == b {
		t.Error("two made ids are the same")
	}
}
