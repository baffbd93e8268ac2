// Package gitstate reads a workspace's Git state with go-git (no git
// command in the sandbox): HEAD, branch, upstream, ahead/behind counts and
// how dirty the worktree is. Everything is read through the workspace's
// guard: a .git file, commondir or alternates, which may name directories
// outside the workspace, are never followed (Open refuses them).
package gitstate
