package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestParsePortMapping(t *testing.T) {
	for in, want := range map[string]portMapping{
		"8080":      {8080, 8080},
		":8080":     {0, 8080},
		"0:8080":    {0, 8080},
		"9000:80":   {9000, 80},
		"1:65535":   {1, 65535},
		"65535:443": {65535, 443},
	} {
		got, err := parsePortMapping(in)
		if err != nil || got != want {
			t.Errorf("parsePortMapping(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "0", "70000", "1:2:3", "x:80", "80:", "80:0", "-1", "8080:abc"} {
		if got, err := parsePortMapping(bad); err == nil {
			t.Errorf("parsePortMapping(%q) = %+v, accepted", bad, got)
		}
	}
}

// Bad mappings are refused before the controller is asked anything (there is none here).
func TestPortForwardBadInput(t *testing.T) {
	t.Setenv("TETHER_TOKEN", "tot_test")
	for _, args := range [][]string{{"ws_x", "abc"}, {"ws_x", "0"}, {"ws_x", "70000"}, {"ws_x", "1:2:3"}, {"ws_x"}, {"ws_x", "8080", "1:2:3"}} {
		var stdout, stderr bytes.Buffer
		all := append([]string{"--addr", "http://127.0.0.1:1", "port-forward"}, args...)
		code := run(context.Background(), all, strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.HasPrefix(stderr.String(), "error: invalid_argument: ") || stdout.Len() != 0 {
			t.Errorf("tether %s: exit %d, stdout %q, stderr %q; want exit 2 and invalid_argument", strings.Join(all, " "), code, stdout.String(), stderr.String())
		}
	}
}
