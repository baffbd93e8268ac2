package fsguard

import (
	"path"
	"strings"
)

// Clean validates a workspace-relative, slash-separated path from the wire
// and returns it in canonical form ("." for the root).
//
// ".." is refused outright rather than lexically resolved: "a/../b" is
// harmless on its face, but once "a" may be a symlink the lexical answer
// and the kernel's answer differ, and the guard must never have to decide
// which one the sender meant.
func Clean(rel string) (string, error) {
	if rel == "" {
		return "", newError(CodeInvalidArgument, rel, "empty path", nil)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return "", newError(CodeInvalidArgument, rel, "path contains a NUL byte", nil)
	}
	if rel[0] == '/' {
		return "", newError(CodePathEscape, rel, "absolute path", nil)
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." {
			return "", newError(CodePathEscape, rel, `path contains ".."`, nil)
		}
	}
	// Only "." elements, duplicate and trailing slashes remain to fold,
	// none of which can change which entry is named.
	return path.Clean(rel), nil
}

// split returns the parent directory and final name of a cleaned path.
// The root has no parent; callers that need a name refuse it.
func split(clean string) (dir, name string) {
	i := strings.LastIndexByte(clean, '/')
	if i < 0 {
		return ".", clean
	}
	return clean[:i], clean[i+1:]
}
