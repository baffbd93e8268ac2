// Package gitops creates and updates the Git repository at a workspace root for the controller's
// Git operations (protocol.OpGitCheckout, OpGitInspect, OpGitReconcile).
//
// Everything works without a git binary (go-git), because sandboxes may have none, and nothing
// runs what the repository's config, hooks or attributes say. Two rules hold throughout: a branch never moves in a way that drops commits (only a
// fast-forward, guarded by a compare-and-swap on the ref), and a tree with uncommitted work is
// never touched.
//
// The workspace's files are reached through guardFS, go-git's view of an fsguard.Root: every
// path is resolved beneath the workspace root without following any symlink, so a symlink
// committed or planted in the tree cannot send a write outside it. The repository is always the
// workspace's own: its .git is a directory inside the root, reached through the same guard; a
// .git file or a commondir naming a directory elsewhere is refused, never followed.
package gitops
