package protocol

import "encoding/json"

// Snapshot operations.
const (
	// OpSnapshotCapture streams the workspace as a snapshot archive (tar → zstd → optional age)
	// in the reply body; the trailer carries the manifest summary. A capture that fails aborts
	// the body with the reason, so nothing partial can be stored as if complete.
	OpSnapshotCapture = "snapshot_capture"
	// OpSnapshotRestore extracts the (plain, zstd) archive in the request body into an empty
	// workspace, verified against its manifest, and publishes it only when whole.
	OpSnapshotRestore = "snapshot_restore"
	// OpTreeDigest walks the workspace exactly as a capture would and answers with the summary
	// (its Tree digest tells whether anything changed since a receipt), storing nothing.
	OpTreeDigest = "tree_digest"
)

// SnapshotCaptureArgs are the arguments of OpSnapshotCapture.
type SnapshotCaptureArgs struct {
	SnapshotID  string `json:"snapshot_id"`
	WorkspaceID string `json:"workspace_id"`
	Epoch       uint64 `json:"epoch,omitempty"`
	Parent      string `json:"parent,omitempty"`
	ZstdLevel   int    `json:"zstd_level,omitempty"`
	// Recipient, when set, is an age X25519 public key: the archive is encrypted to it before it
	// leaves the sandbox.
	Recipient string `json:"recipient,omitempty"`
	// Incremental asks for refs (bytes in an earlier receipt) to files the runner's capture
	// cache proves unchanged since the capture or restore of Parent; without a usable cache
	// the capture is full.
	Incremental bool `json:"incremental,omitempty"`
	// ParentTree is Parent's tree digest: a cache of another capture whose tree had this very
	// digest lists the same paths with the same contents, so its refs match Parent's too (a
	// checkpoint that found nothing changed is dropped and never becomes a parent).
	ParentTree string `json:"parent_tree,omitempty"`
}

// SnapshotSummary is what the controller keeps of a manifest beside the receipt; the full
// manifest travels inside the archive as its last entry.
type SnapshotSummary struct {
	Entries  int             `json:"entries"`
	Files    int             `json:"files"`
	Dirs     int             `json:"dirs"`
	Symlinks int             `json:"symlinks"`
	Bytes    int64           `json:"bytes"` // content bytes of the tree
	Skipped  int             `json:"skipped,omitempty"`
	Git      json.RawMessage `json:"git,omitempty"`
	Parent   string          `json:"parent,omitempty"`
	Manifest string          `json:"manifest_sha256"` // SHA-256 of the manifest's canonical JSON
	// Tree is the SHA-256 of the entries' canonical JSON (paths, types, modes, sizes, content
	// hashes, link targets, mtimes): two captures of an unchanged tree have the same Tree.
	Tree      string `json:"tree_sha256"`
	Tool      string `json:"tool_version,omitempty"`
	Encrypted bool   `json:"encrypted,omitempty"`
}

// SnapshotRestoreArgs are the arguments of OpSnapshotRestore.
type SnapshotRestoreArgs struct {
	SnapshotID string `json:"snapshot_id"`
	Dir        string `json:"dir,omitempty"`
	MaxEntries int    `json:"max_entries,omitempty"`
	MaxBytes   int64  `json:"max_bytes,omitempty"`
	// MaxApparentBytes refuses a restore whose files are longer than this in all (a sparse
	// file counts its whole length), before anything is written; the target's free space is
	// always checked.
	MaxApparentBytes int64 `json:"max_apparent_bytes,omitempty"`
}
