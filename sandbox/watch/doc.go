// Package watch reports the changes under one workspace directory as they happen, from inotify.
//
// Every directory is opened through the guard (no symlink followed, nothing outside the root)
// and watched through the descriptor the guard resolved (/proc/self/fd/N), so a path swapped for
// a symlink between the check and the watch cannot point a watch elsewhere. Events go into a
// bounded queue that the kernel reader never waits on: when the queue is full, events are dropped
// and one overflow event says so. Tether's own temporary files and staging directories are left
// out; what they become (their final rename) is reported as a create.
package watch
