package fsguard

import (
	"path"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, want, code string
	}{
		{in: "", code: CodeInvalidPath},
		{in: "a\x00b", code: CodeInvalidPath},
		{in: "a//b", code: CodeInvalidPath},
		{in: "a/", code: CodeInvalidPath},
		{in: "./", code: CodeInvalidPath},
		{in: strings.Repeat("n", 256), code: CodeInvalidPath},
		{in: strings.Repeat("a/", 2048) + "b", code: CodeInvalidPath},
		{in: strings.Repeat("n", 255), want: strings.Repeat("n", 255)},
		{in: "/etc/passwd", code: CodePathEscape},
		{in: "/", code: CodePathEscape},
		{in: "..", code: CodePathEscape},
		{in: "../x", code: CodePathEscape},
		{in: "a/../../x", code: CodePathEscape},
		{in: "a/..", code: CodePathEscape},
		{in: "a/../b", code: CodePathEscape},
		{in: "a/b/..", code: CodePathEscape},
		{in: ".", want: "."},
		{in: "a", want: "a"},
		{in: "./a/./b/c", want: "a/b/c"},
		{in: "..a/b..", want: "..a/b.."},
		{in: "a\\..\\b", want: "a\\..\\b"}, // backslash is an ordinary byte on Linux
	} {
		got, err := Clean(tc.in)
		if tc.code != "" {
			wantCode(t, err, tc.code)
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "../x", "/etc/passwd", "a/../../x", "a//b/./c/", "a\x00", "...", "a/.../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Clean(in)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if out == "" || path.IsAbs(out) || strings.IndexByte(out, 0) >= 0 {
			t.Fatalf("Clean(%q) accepted %q", in, out)
		}
		for _, elem := range strings.Split(out, "/") {
			if elem == ".." || elem == "" || (elem == "." && out != ".") {
				t.Fatalf("Clean(%q) = %q has element %q", in, out, elem)
			}
		}
		if again, err := Clean(out); err != nil || again != out {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q, %v", in, out, again, err)
		}
	})
}
