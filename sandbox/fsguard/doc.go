// Package fsguard confines every filesystem operation on a workspace to one
// directory tree. Paths are resolved with openat2(2) RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS (or, where openat2 is not
// available, a walk that opens one component at a time with O_NOFOLLOW),
// and every operation then acts through the resulting descriptor or on a
// single name inside a resolved parent directory, so no symlink, ".." or
// concurrent rename can redirect it outside the root.
package fsguard
