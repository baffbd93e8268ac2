package controller

import (
	"net/http/httptest"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{{"TERM", 15}, {"SIGTERM", 15}, {"term", 15}, {"sigint", 2}, {"9", 9}, {" KILL ", 9}, {"64", 64}} {
		if got, err := parseSignal(tc.in); err != nil || got != tc.want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "NOSUCH", "SIG", "0", "65", "-1", "SIGTERM2"} {
		if _, err := parseSignal(in); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("parseSignal(%q): %v; want invalid_argument", in, err)
		}
	}
}

func TestRunLogsArgs(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/runs/run_x/logs?stdout_offset=10&stderr_offset=3&stream=stderr&follow=true", nil)
	a, err := runLogsArgs(r)
	if err != nil || a != (protocol.RunLogsArgs{StdoutOffset: 10, StderrOffset: 3, Stream: "stderr", Follow: true}) {
		t.Fatalf("runLogsArgs = %+v, %v", a, err)
	}
	for _, q := range []string{"stdout_offset=-1", "stderr_offset=x", "stream=stdin", "follow=maybe"} {
		r := httptest.NewRequest("GET", "/v1/runs/run_x/logs?"+q, nil)
		if _, err := runLogsArgs(r); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("?%s: %v; want invalid_argument", q, err)
		}
	}
}
