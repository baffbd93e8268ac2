package protocol

import "time"

// File operations. Paths are workspace-relative and slash-separated; the runner resolves each
// through its guard.
const (
	OpFsList   = "fs_list"
	OpFsStat   = "fs_stat"
	OpFsRead   = "fs_read"
	OpFsWrite  = "fs_write"
	OpFsMkdir  = "fs_mkdir"
	OpFsRemove = "fs_remove"
	OpFsRename = "fs_rename"
	OpFsChmod  = "fs_chmod"
)

// File types in FileInfo.
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
	FileOther   = "other" // fifo, socket, device: listed, never opened
)

// MaxListPage bounds one page of a directory listing.
const MaxListPage = 1000

// FileInfo describes one entry. Symlinks are described, never followed.
type FileInfo struct {
	Path       string    `json:"path"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Mode       uint32    `json:"mode"` // permission bits
	Size       int64     `json:"size"`
	MTime      time.Time `json:"mtime"`
	LinkTarget string    `json:"link_target,omitempty"`
	// ReadSource is set by the controller on a stat answer (never by a runner, never on the
	// entries of a listing: the page carries it).
	ReadSource
}

// Sources of a file read.
const (
	SourceLive  = "live"  // the workspace's allocation, through its runner
	SourceSaved = "saved" // the workspace's last snapshot receipt
)

// ReadSource says where the controller's files API read an answer from: the live allocation
// (with its id) or a saved receipt (with its id and save time).
type ReadSource struct {
	Source       string     `json:"source,omitempty"`
	AllocationID string     `json:"allocation_id,omitempty"`
	SnapshotID   string     `json:"snapshot_id,omitempty"`
	SavedAt      *time.Time `json:"saved_at,omitempty"`
}

// FsListArgs asks for one page of a directory, sorted by name, starting after Cursor.
type FsListArgs struct {
	Path   string `json:"path"`
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// FsListResult is one page; Next is the cursor of the following page, empty at the end.
type FsListResult struct {
	Entries []FileInfo `json:"entries"`
	Next    string     `json:"next,omitempty"`
	ReadSource
}

// FsPathArgs names one path (stat, mkdir, remove, chmod).
type FsPathArgs struct {
	Path      string `json:"path"`
	Parents   bool   `json:"parents,omitempty"`   // mkdir: create missing parents, no error if it exists
	Recursive bool   `json:"recursive,omitempty"` // remove: a directory and everything in it
	Mode      uint32 `json:"mode,omitempty"`      // mkdir, chmod
}

// FsReadArgs asks for Length bytes from Offset (Length < 0: to the end). Suffix > 0 asks for the
// last Suffix bytes instead (HTTP "bytes=-N").
type FsReadArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Length int64  `json:"length"`
	Suffix int64  `json:"suffix,omitempty"`
}

// FsReadReply precedes the body of a read: what is about to be sent.
type FsReadReply struct {
	Info   FileInfo `json:"info"`
	Offset int64    `json:"offset"`
	Length int64    `json:"length"`
}

// FsWriteArgs describe a streamed write; the body is the content.
type FsWriteArgs struct {
	Path     string `json:"path"`
	Mode     uint32 `json:"mode,omitempty"` // default 0644
	Replace  bool   `json:"replace,omitempty"`
	IfSHA256 string `json:"if_sha256,omitempty"` // publish only over this current content
	// SHA256, when set, is what the sender says the content hashes to; a mismatch publishes nothing.
	SHA256   string `json:"sha256,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
	// SHA256Trailer says the sender's SHA-256 comes in the body's terminator (BodySum.SHA256)
	// instead: a client that hashes as it sends, rather than reading its file twice. The runner
	// checks it like SHA256 before publishing, and a body that ends without one publishes
	// nothing. Only for a runner that advertises CapWriteSHA256Trailer.
	SHA256Trailer bool `json:"sha256_trailer,omitempty"`
}

// FsWriteResult is what was written and published.
type FsWriteResult struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// FsRenameArgs moves From to To; an existing To is kept (exists) unless Replace.
type FsRenameArgs struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Replace bool   `json:"replace,omitempty"`
}

// Resolve turns a read request into the offset and length it covers in a file of size bytes:
// the last Suffix bytes, or Length bytes from Offset (to the end when Length < 0). An offset at
// or past the end of a non-empty file is CodeInvalidRange.
func (a FsReadArgs) Resolve(size int64) (off, n int64, err error) {
	if a.Suffix > 0 {
		n := min(a.Suffix, size)
		return size - n, n, nil
	}
	if a.Offset < 0 || (a.Offset > 0 && a.Offset >= size) {
		return 0, 0, Errorf(CodeInvalidRange, "offset %d is outside a file of %d bytes", a.Offset, size)
	}
	n = size - a.Offset
	if a.Length >= 0 && a.Length < n {
		n = a.Length
	}
	return a.Offset, n, nil
}
