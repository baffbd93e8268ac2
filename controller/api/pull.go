package api

// PathState is what one tree holds at a path in a pull: Type is empty when it holds nothing.
type PathState struct {
	Type       string `json:"type,omitempty"` // file | dir | symlink
	Mode       uint32 `json:"mode,omitempty"`
	Size       int64  `json:"size,omitempty"`
	SHA256     string `json:"sha256,omitempty"`
	LinkTarget string `json:"link_target,omitempty"`
	// Sparse: SHA256 is the content digest that skips zero blocks (snapshot.ContentHash).
	Sparse bool `json:"sparse,omitempty"`
}

// PathChange is a path the workspace changed since its base.
type PathChange struct {
	Path      string    `json:"path"`
	Base      PathState `json:"base"`
	Workspace PathState `json:"workspace"`
}

// GitHead is where a tree's repository stood.
type GitHead struct {
	Head   string `json:"head,omitempty"`
	Branch string `json:"branch,omitempty"`
}

// SourceRequest is the body of POST /v1/workspaces/{id}/source: the host directory the
// workspace's tree was imported from.
type SourceRequest struct {
	Dir string `json:"dir"`
}

// PullRequest is the body of POST /v1/workspaces/{id}/pull.
type PullRequest struct {
	// Snapshot pulls a receipt of the workspace instead of a fresh capture.
	Snapshot string `json:"snapshot,omitempty"`
}

// PullPlan answers POST /v1/workspaces/{id}/pull: what the workspace changed since its base,
// read from two receipts so the plan and the bytes that follow agree. Paths under .git are
// never in Changes: a repository's history travels as a pack (Git), never as files.
type PullPlan struct {
	WorkspaceID   string `json:"workspace_id"`
	WorkspaceName string `json:"workspace_name"`
	SourceDir     string `json:"source_dir,omitempty"`
	Base          string `json:"base"`
	Snapshot      string `json:"snapshot"`
	// Fresh: Snapshot was captured for this pull (or the tree was the newest receipt's).
	Fresh   bool         `json:"fresh"`
	BaseGit *GitHead     `json:"base_git,omitempty"`
	Git     *GitHead     `json:"git,omitempty"`
	Changes []PathChange `json:"changes"`
	// Project is set for a project workspace: its work is its branch, delivered to the
	// project's source; Changes is then empty and Uncommitted counts what a delivery leaves
	// behind (staged, unstaged and untracked paths).
	Project     *PullProject `json:"project,omitempty"`
	Uncommitted int          `json:"uncommitted,omitempty"`
	// Skipped are changed paths a pull never carries: inside a .git (at any depth), or named
	// like Tether's temporary files.
	Skipped Skipped `json:"skipped"`
}

// Skipped counts paths left out, naming the first ones.
type Skipped struct {
	Count int      `json:"count"`
	Paths []string `json:"paths,omitempty"`
}

// PullProject is where a project workspace's branch goes.
type PullProject struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Source string `json:"source"`
	// Branch is the workspace's branch; Haves the commits the source surely has.
	Branch string   `json:"branch"`
	Haves  []string `json:"haves"`
}

// FilesRequest is the body of POST /v1/snapshots/{id}/files: the regular files whose bytes to
// send (at most MaxFilesRequest, in any order).
type FilesRequest struct {
	Paths []string `json:"paths"`
}

// MaxFilesRequest bounds the paths of one FilesRequest.
const MaxFilesRequest = 100_000

// IsObjectID says s is a full Git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
func IsObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// PulledRequest is the body of POST /v1/workspaces/{id}/pulled: a pull from Base brought
// Snapshot back whole into the source directory, so Snapshot is the base from now on.
type PulledRequest struct {
	Base     string `json:"base"`
	Snapshot string `json:"snapshot"`
}
