package protocol

import (
	"fmt"
	"strings"
	"time"
)

// OpFsWatch streams the changes under one workspace directory. The runner answers a trailer
// whose Result is an FsWatchStarted (or the refusal: the path is missing, not a directory, a
// symlink, or escapes), then ChanWatchEvent frames, one JSON WatchEvent each, until the
// controller closes the stream or the runner's context ends; a watch that ends on its own (the
// directory was removed) sends one ChanError frame last.
const OpFsWatch = "fs_watch"

// ChanWatchEvent carries one JSON WatchEvent of an OpFsWatch stream (runner → controller).
const ChanWatchEvent Channel = 9

// FsWatchArgs are the arguments of OpFsWatch.
type FsWatchArgs struct {
	Path      string `json:"path"`                // workspace-relative directory
	Recursive bool   `json:"recursive,omitempty"` // watch every directory beneath it too
}

// FsWatchStarted is the first trailer's result of OpFsWatch: the watch is in place.
type FsWatchStarted struct {
	Path    string `json:"path"`    // the watched directory, clean
	Watches int    `json:"watches"` // directories watched
}

// Watch event types.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename"
	WatchChmod  = "chmod"
	// WatchOverflow says events were lost (the runner's queue or the kernel's was full, or a
	// directory could not be watched): what the watcher knows may be stale; rescan.
	WatchOverflow = "overflow"
)

// MaxWatchEvent bounds one encoded WatchEvent (two paths of PATH_MAX and change).
const MaxWatchEvent = 12 << 10

// MaxWatchPath bounds a WatchEvent's path (Linux's PATH_MAX).
const MaxWatchPath = 4096

// WatchEvent is one change under a watched directory. Paths are workspace-relative and clean
// (slash-separated, no "..", no empty component).
type WatchEvent struct {
	Type string `json:"type"`
	// Path is what changed: for a rename, its new name. Empty only for an overflow that names
	// no directory.
	Path string `json:"path,omitempty"`
	// OldPath is a rename's former name.
	OldPath string    `json:"old_path,omitempty"`
	IsDir   bool      `json:"is_dir,omitempty"`
	Time    time.Time `json:"time"`
	// Reason says why an overflow happened.
	Reason string `json:"reason,omitempty"`
	// Error ends a watch stream the controller sends its client (type WatchError): the reason
	// the watch stopped. Never from a runner.
	Error *Error `json:"error,omitempty"`
}

// WatchError is the type of the last line of a controller's watch stream when the watch ended
// (the runner's connection dropped, the directory was removed, the runner sent something wrong).
// A stream that ends without it was cut.
const WatchError = "error"

// KnownWatchType reports whether t is one of the watch event types.
func KnownWatchType(t string) bool {
	switch t {
	case WatchCreate, WatchWrite, WatchRemove, WatchRename, WatchChmod, WatchOverflow:
		return true
	}
	return false
}

// CheckWatchShape checks what can be checked of an event without knowing the watch: a known
// type, paths present where the type needs them and bounded, old_path only on a rename, a
// reason only on an overflow and bounded.
func (e WatchEvent) CheckWatchShape() error {
	bad := func(format string, a ...any) error {
		return Errorf(CodeCorrupt, "watch event %s: %s", e.Type, fmt.Sprintf(format, a...))
	}
	if !KnownWatchType(e.Type) || e.Error != nil {
		return Errorf(CodeCorrupt, "watch event of unknown type %q", e.Type)
	}
	if len(e.Path) > MaxWatchPath || len(e.OldPath) > MaxWatchPath || len(e.Reason) > 256 {
		return bad("too long")
	}
	if e.Type != WatchOverflow && e.Path == "" {
		return bad("no path")
	}
	if (e.OldPath != "") != (e.Type == WatchRename) {
		return bad("old_path is for a rename only, and a rename needs one")
	}
	if e.Reason != "" && e.Type != WatchOverflow {
		return bad("reason is for an overflow only")
	}
	if strings.ContainsRune(e.Reason, 0) {
		return bad("reason holds a NUL")
	}
	return nil
}
