package main

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestRelativeTo(t *testing.T) {
	for _, tc := range []struct {
		root, p, want string
		code          protocol.Code
	}{
		{"/workspace", "/workspace/x", "x", ""},
		{"/workspace", "/workspace/a/b.txt", "a/b.txt", ""},
		{"/workspace", "/workspace", ".", ""},
		{"/workspace/", "/workspace/", ".", ""},
		{"/workspace", "/workspace/dir/", "dir", ""},
		// The guard judges what is left: ".." is passed on for it to refuse.
		{"/workspace", "/workspace/../etc", "../etc", ""},
		{"/workspace", "/workspacex/a", "", protocol.CodePathEscape},
		{"/workspace", "/etc/passwd", "", protocol.CodePathEscape},
		{"", "/workspace/x", "", protocol.CodePathEscape},
		{"/", "/a/b", "a/b", ""},
	} {
		got, err := relativeTo(tc.root, tc.p)
		if tc.code != "" {
			if protocol.CodeOf(err) != tc.code {
				t.Errorf("relativeTo(%q, %q) = %q, %v; want code %s", tc.root, tc.p, got, err, tc.code)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("relativeTo(%q, %q) = %q, %v; want %q", tc.root, tc.p, got, err, tc.want)
		}
	}
	_, err := relativeTo("/workspace", "/etc/passwd")
	if err == nil || !strings.Contains(err.Error(), "paths are relative to the workspace root (/workspace)") {
		t.Errorf("no hint: %v", err)
	}
}
