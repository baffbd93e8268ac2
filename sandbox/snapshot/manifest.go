package snapshot

import (
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/gitstate"
	"github.com/tetherhq/tether/sandbox/internal/staging"
)

// ManifestName is the name of the archive's last entry. A workspace file
// of this name at the root fails a capture (CodeReservedName); anywhere
// else, it and names like Tether's temporary files (fsguard.TempPrefix*,
// staging.Prefix*) are archived and restored like any other, but for the
// runner's own in-flight ones (fsguard.Holds), which are skipped.
const ManifestName = ".tether-manifest.json"

// FormatVersion is the manifest version Capture writes and Restore reads.
const FormatVersion = 1

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// Entry describes one archived path.
type Entry struct {
	Path string `json:"path"`
	Type string `json:"type"` // file | dir | symlink
	// Mode holds the permission bits and the setuid, setgid and sticky
	// bits, as in a tar header (0o7777 at most).
	Mode       uint32    `json:"mode"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256,omitempty"`
	LinkTarget string    `json:"link_target,omitempty"`
	MTime      time.Time `json:"mtime"`
	// Sparse says the file was archived in the GNU sparse format; its SHA256 is then not
	// the SHA-256 of its bytes but ContentHash's digest, which skips zero blocks (sparse.go).
	Sparse bool `json:"sparse,omitempty"`
	// Ref says the file's bytes are not in this archive but in an earlier receipt's (an
	// incremental capture, cache.go): SHA256, Size and Sparse name them. The tree digest
	// leaves it out (TreeDigest), so a tree digests the same whichever capture holds it.
	Ref bool `json:"ref,omitempty"`
}

// Skipped is a path Capture left out, and why.
type Skipped struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// Totals counts the manifest's entries; Bytes is the content size of its
// regular files.
type Totals struct {
	Entries  int   `json:"entries"`
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}

// Manifest is the archive's last entry.
type Manifest struct {
	Version     int             `json:"version"`
	WorkspaceID string          `json:"workspace_id"`
	Epoch       uint64          `json:"epoch"`
	Parent      string          `json:"parent"`
	ToolVersion string          `json:"tool_version"`
	CreatedAt   time.Time       `json:"created_at"`
	Entries     []Entry         `json:"entries"`
	Skipped     []Skipped       `json:"skipped"`
	Totals      Totals          `json:"totals"`
	Git         *gitstate.State `json:"git,omitempty"`
	// GitError says why Git is missing although the workspace has a .git:
	// a .git file, commondir or objects/info/alternates (never followed:
	// they may name directories outside the workspace), or a layout go-git
	// cannot read. The files, .git included, were still captured as they
	// are.
	GitError string `json:"git_error,omitempty"`

	// SHA256 is the SHA-256 of the manifest's JSON exactly as archived
	// (lowercase hex); Capture archives json.Marshal of the manifest. It
	// is set by Capture, Restore and ReadManifest and is not part of the
	// JSON.
	SHA256 string `json:"-"`
	// JSONSize is the size of that JSON in bytes.
	JSONSize int64 `json:"-"`
	// TreeSHA256 is the SHA-256 of json.Marshal(Entries), set by Capture (which computes it
	// while it writes the manifest, see ManifestDigests); not part of the JSON.
	TreeSHA256 string `json:"-"`
}

// Error codes. The strings are those of the wire protocol.
const (
	CodeChangedDuringCapture = "changed_during_capture"
	CodeGitBusy              = "git_busy"
	CodeInvalidArgument      = "invalid_argument"
	CodePathEscape           = "path_escape"
	CodeSymlinkRefused       = "symlink_refused"
	CodeCorrupt              = "corrupt"
	CodeTooLarge             = "too_large"
	CodeUnsupported          = "unsupported"
	CodeExists               = "exists"
	CodeNoSpace              = "no_space"
)

// Error is a capture or restore failure with a typed code; Path is the
// workspace- or archive-relative path concerned.
type Error struct {
	Code    string
	Path    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	s := e.Code
	if e.Path != "" {
		s += ": " + e.Path
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode is how the runner reads the code without importing this
// package.
func (e *Error) ErrorCode() string { return e.Code }

// Is matches any *Error with the same code (and path, when the target
// names one).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Path == "" || t.Path == e.Path)
}

func newError(code, path, msg string, err error) *Error {
	return &Error{Code: code, Path: path, Message: msg, Err: err}
}

// reserved reports whether a single path component looks like a name
// Tether uses for itself.
func reserved(name string) bool {
	return name == ManifestName || strings.HasPrefix(name, fsguard.TempPrefix) || strings.HasPrefix(name, staging.Prefix)
}

// totals recomputes the totals of a list of entries.
func totals(entries []Entry) Totals {
	var t Totals
	for i := range entries {
		t.add(&entries[i])
	}
	return t
}
