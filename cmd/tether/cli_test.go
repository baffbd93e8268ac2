package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRetryForFlag(t *testing.T) {
	t.Setenv("TETHER_TOKEN", "tot_test")
	for _, tc := range []struct {
		args   []string
		env    string
		code   int
		prefix string
	}{
		{[]string{"--retry-for", "soon", "workspace", "ls"}, "", 2, "error: invalid_argument: --retry-for \"soon\""},
		{[]string{"workspace", "ls"}, "-1s", 2, "error: invalid_argument: --retry-for \"-1s\""},
		// The flag wins over the environment; 0 gives up at once on a refused connection.
		{[]string{"--retry-for", "0", "workspace", "ls"}, "bogus", 15, "error: unavailable: cannot reach the controller"},
		{[]string{"workspace", "ls"}, "0", 15, "error: unavailable: cannot reach the controller"},
	} {
		t.Setenv("TETHER_RETRY_FOR", tc.env)
		var stdout, stderr bytes.Buffer
		args := append([]string{"--addr", "http://127.0.0.1:1"}, tc.args...)
		code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.HasPrefix(stderr.String(), tc.prefix) {
			t.Errorf("tether %s (TETHER_RETRY_FOR=%q): exit %d, %q; want exit %d, %q...", strings.Join(args, " "), tc.env, code, stderr.String(), tc.code, tc.prefix)
		}
	}
}
