package protocol

import "time"

// Resumable uploads. The controller keeps the session's record; the runner stages its bytes in
// its private state directory (never in the workspace) and is the judge of how many of them it
// holds: the verified offset is the length it staged and hashed, never a client's claim.
const (
	// OpFsUploadChunk appends its body (exactly Length bytes) to the session's staged bytes at
	// Offset; the chunk that completes Size publishes the file when the whole SHA-256 matches.
	// A zero-length chunk at Offset == Size retries a publish that failed (the target existed).
	OpFsUploadChunk = "fs_upload_chunk"
	// OpFsUploadStatus says how much of a session the runner holds (CodeNotFound: nothing).
	OpFsUploadStatus = "fs_upload_status"
	// OpFsUploadAbort forgets a session and removes its staged bytes (unknown: no error).
	OpFsUploadAbort = "fs_upload_abort"
)

// Upload bounds.
const (
	// MaxUploadChunk bounds one chunk: what a cut chunk costs to send again.
	MaxUploadChunk = 64 << 20
	// MaxUploadSessions bounds the sessions one runner stages at once.
	MaxUploadSessions = 32
	// UploadIDPrefix starts every session id; UploadIDLen is an id's full length.
	UploadIDPrefix = "up_"
	UploadIDLen    = len(UploadIDPrefix) + 32
)

// ValidUploadID reports whether id has the form of a session id (the prefix, then 32 characters
// of lowercase base32): the runner names a staged file after it.
func ValidUploadID(id string) bool {
	if len(id) != UploadIDLen || id[:len(UploadIDPrefix)] != UploadIDPrefix {
		return false
	}
	for _, c := range id[len(UploadIDPrefix):] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// FsUploadChunkArgs are the arguments of OpFsUploadChunk. Every chunk carries the session's
// whole description, so a runner that never saw the session (a restart, another allocation)
// starts it at offset 0 and one that did refuses a chunk that describes it differently.
type FsUploadChunkArgs struct {
	Session   string    `json:"session"`
	Path      string    `json:"path"`
	Size      int64     `json:"size"`   // the whole file's
	SHA256    string    `json:"sha256"` // the whole file's, lowercase hex
	Mode      uint32    `json:"mode,omitempty"`
	Replace   bool      `json:"replace,omitempty"`
	ExpiresAt time.Time `json:"expires_at"` // the runner drops the staged bytes after it
	Offset    int64     `json:"offset"`
	Length    int64     `json:"length"`
}

// FsUploadSessionArgs name one session (status, abort).
type FsUploadSessionArgs struct {
	Session string `json:"session"`
}

// FsUploadStatus is what the runner holds of a session: Offset bytes staged and hashed, and,
// once published, the write's result.
type FsUploadStatus struct {
	Session string         `json:"session"`
	Offset  int64          `json:"offset"`
	Size    int64          `json:"size"`
	Done    bool           `json:"done,omitempty"`
	Result  *FsWriteResult `json:"result,omitempty"`
}
