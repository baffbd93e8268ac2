package main

import (
	"context"
	"path"
	"strings"

	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// remotePath turns a workspace path the operator typed into the workspace-relative path the
// runner's guard judges. A relative path goes as it is (the guard refuses "..", empty components
// and symlinks). An absolute path inside the workspace's root (/workspace/x when the root is
// /workspace) is that relative path (x): it is what a command run in the sandbox prints. Any
// other absolute path is refused path_escape with a hint, here, before anything is sent. The
// guard itself stays strict: only this translation is added, on the client's side, because only
// the client knows that an operator meant the sandbox's own view of the path.
func remotePath(ctx context.Context, cl *client.Client, ws, p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return p, nil
	}
	rec, err := cl.GetWorkspace(ctx, ws)
	if err != nil {
		return "", err
	}
	return relativeTo(rec.Root, p)
}

// relativeTo is p, absolute, relative to root; refused unless p is root or beneath it.
func relativeTo(root, p string) (string, error) {
	if root == "" || !strings.HasPrefix(root, "/") {
		return "", protocol.Errorf(protocol.CodePathEscape, "%s: absolute path; paths are relative to the workspace root", p)
	}
	root = path.Clean(root)
	// A trailing slash on a directory is how shells complete it; it names the same directory.
	trimmed := strings.TrimRight(p, "/")
	switch {
	case trimmed == root || (root == "/" && trimmed == ""):
		return ".", nil
	case root == "/":
		return trimmed[1:], nil
	case strings.HasPrefix(trimmed, root+"/"):
		return trimmed[len(root)+1:], nil
	}
	return "", protocol.Errorf(protocol.CodePathEscape, "%s is outside the workspace: paths are relative to the workspace root (%s)", p, root)
}
