// Package gitlimit bounds what go-git reads of a workspace's Git metadata. go-git reads HEAD,
// refs, packed-refs, config and the index whole into memory, and the workspace's agent controls
// those files: a 2 GiB sparse HEAD would take the runner (64 MiB budget) down, and the workspace
// could then never be saved. Every file of a git directory is opened through fsguard (regular
// files only, O_NOFOLLOW, O_NONBLOCK) and then read through Limit, which refuses, with a typed
// too_large error, a file larger than the cap of its kind, at open and again if it grows while
// it is read.
//
// Caps, by path inside the git directory:
//
//	HEAD, ORIG_HEAD, MERGE_HEAD, *_HEAD, refs/**, commondir, gitdir   4 KiB (one ref: 41 bytes, a symref a path)
//	FETCH_HEAD, shallow, info/**, logs/**, anything else               1 MiB
//	config                                                             1 MiB
//	packed-refs                                                       64 MiB (about 700,000 refs)
//	index                                                            128 MiB (about 1.5 million files)
//	objects/**                                                     no cap: loose objects and packs are streamed
//
// The index and packed-refs caps stay below what a very large monorepo writes; a bigger one
// makes Git's state unreadable here (the capture records git_error and still saves every file),
// never the runner's memory exhausted.
package gitlimit

import (
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"

	"github.com/tetherhq/tether/protocol"
)

const (
	refCap         = 4 << 10
	defaultCap     = 1 << 20
	configCap      = 1 << 20
	packedRefsCap  = 64 << 20
	indexCap       = 128 << 20
	noCap          = -1
	objectsDirName = "objects"
)

// Cap is the most bytes go-git may read of name, a slash-separated path inside a git
// directory; -1 means no cap (objects, which are streamed).
func Cap(name string) int64 {
	name = strings.Trim(path.Clean("/"+name), "/")
	first, _, _ := strings.Cut(name, "/")
	switch {
	case first == objectsDirName:
		return noCap
	case name == "index":
		return indexCap
	case name == "packed-refs":
		return packedRefsCap
	case name == "config":
		return configCap
	case name == "FETCH_HEAD":
		return defaultCap
	case first == "refs" || name == "HEAD" || strings.HasSuffix(name, "_HEAD") || name == "commondir" || name == "gitdir":
		return refCap
	}
	return defaultCap
}

// CheckSize refuses (too_large) a file of size bytes at name over its cap.
func CheckSize(name string, size int64) error {
	if limit := Cap(name); limit != noCap && size > limit {
		return TooLarge(name, size, limit)
	}
	return nil
}

// TooLarge is the typed error for a file over its cap.
func TooLarge(name string, size, limit int64) error {
	return protocol.Errorf(protocol.CodeTooLarge, "git metadata file %s is %d bytes or more, over the %s this runner reads of it", name, size, human(limit))
}

func human(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// File is what Limit wraps: an open file's reads and its size.
type File interface {
	io.Reader
	io.ReaderAt
}

// Reader counts the bytes read through it and fails once they pass the cap. It is safe for
// the concurrent ReadAt calls go-git makes on pack files (which have no cap anyway).
type Reader struct {
	f     File
	name  string
	limit int64
	read  atomic.Int64
}

// Limit checks a file of a git directory at open: size is its size then. It returns nil, nil
// when name has no cap, and a Reader to read it through otherwise.
func Limit(f File, name string, size int64) (*Reader, error) {
	limit := Cap(name)
	if limit == noCap {
		return nil, nil
	}
	if size > limit {
		return nil, TooLarge(name, size, limit)
	}
	return &Reader{f: f, name: name, limit: limit}, nil
}

func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.f.Read(r.clip(p))
	if total := r.read.Add(int64(n)); total > r.limit {
		return n - int(total-r.limit), TooLarge(r.name, total, r.limit)
	}
	return n, err
}

func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off > r.limit && len(p) > 0 {
		return 0, TooLarge(r.name, off, r.limit)
	}
	// One byte past the cap is asked for, so that a file that grew beyond it is noticed.
	n, err := r.f.ReadAt(p[:min(int64(len(p)), r.limit+1-off)], off)
	if off+int64(n) > r.limit {
		return int(r.limit - off), TooLarge(r.name, off+int64(n), r.limit)
	}
	return n, err
}

// clip lets a read take one byte past the cap, so that a file that grew beyond it is noticed.
func (r *Reader) clip(p []byte) []byte {
	left := r.limit + 1 - r.read.Load()
	return p[:max(0, min(int64(len(p)), left))]
}
