package fsguard

import (
	"fmt"
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
//
// Empty components ("a//b", a trailing "/") are refused too: a sender that
// produces them has mangled a path somewhere, and guessing what it meant is
// how path confusions start. All checks run before any syscall.
func Clean(rel string) (string, error) {
	if rel == "" {
		return "", newError(CodeInvalidPath, rel, "empty path", nil)
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return "", newError(CodeInvalidPath, rel, "path contains a NUL byte", nil)
	}
	if len(rel) > MaxPathLen {
		return "", newError(CodeInvalidPath, rel[:64]+"...", fmt.Sprintf("path is longer than %d bytes", MaxPathLen), nil)
	}
	if rel[0] == '/' {
		return "", newError(CodePathEscape, rel, "absolute path", nil)
	}
	for _, elem := range strings.Split(rel, "/") {
		switch {
		case elem == "..":
			return "", newError(CodePathEscape, rel, `path contains ".."`, nil)
		case elem == "":
			return "", newError(CodeInvalidPath, rel, "path has an empty component", nil)
		case len(elem) > MaxNameLen:
			return "", newError(CodeInvalidPath, rel, fmt.Sprintf("a component is longer than %d bytes", MaxNameLen), nil)
		}
	}
	// Only "." elements remain to fold, which cannot change which entry is
	// named.
	return path.Clean(rel), nil
}

// Limits of a wire path, those of Linux (PATH_MAX, NAME_MAX).
const (
	MaxPathLen = 4096
	MaxNameLen = 255
)

// split returns the parent directory and final name of a cleaned path.
// The root has no parent; callers that need a name refuse it.
func split(clean string) (dir, name string) {
	i := strings.LastIndexByte(clean, '/')
	if i < 0 {
		return ".", clean
	}
	return clean[:i], clean[i+1:]
}
