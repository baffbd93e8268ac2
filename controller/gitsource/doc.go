// Package gitsource keeps the controller's managed bare "base clone" of a project's Git source (a
// path on the controller's host or a URL git can fetch). Packs for workspaces' checkouts and
// reconciles are generated from it, and delivery state is decided from it. Only the controller
// writes it: no workspace shares its config, refs, hooks or objects.
//
// Everything runs the real git CLI, made by one helper (Repo.command): no system, global or
// per-user config, hooks and fsmonitor off, only the source's transport, a clean environment (no
// GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE or other repository-redirecting or config-injecting
// variables; no terminal prompts; C locale so stderr can be classified), "/" as its working
// directory, and no ref name, revision or source can be read as an option. A base clone whose
// config holds anything a bare clone does not write is refused. Callers serialize Ensure and
// Remove per directory and Fetch per ref; when git's own lock files collide the error is
// CodeGitBusy.
package gitsource
