package api

import (
	"time"

	"github.com/tetherhq/tether/protocol"
)

// UploadCreate starts a resumable upload (POST /v1/workspaces/{id}/uploads): a file of Size
// bytes whose whole SHA-256 is declared up front. Chunks then go to
// PUT …/uploads/{upload}?offset=N; the one that completes Size publishes the file at Path when
// the bytes hash to SHA256.
type UploadCreate struct {
	Path    string             `json:"path"`
	Size    int64              `json:"size"`
	SHA256  string             `json:"sha256"`
	Mode    uint32             `json:"mode,omitempty"` // permission bits; 0: 0644
	Replace bool               `json:"replace,omitempty"`
	TTL     *protocol.Duration `json:"ttl,omitempty"` // default 24h, at most 7 days
}

// Upload is a resumable upload session. Offset is how many bytes the runner holds staged and
// hashed (asked from the runner when it is connected; else the last it confirmed): the next
// chunk goes there.
type Upload struct {
	ID          string                  `json:"id"`
	WorkspaceID string                  `json:"workspace_id"`
	Path        string                  `json:"path"`
	Size        int64                   `json:"size"`
	SHA256      string                  `json:"sha256"`
	Mode        uint32                  `json:"mode,omitempty"`
	Replace     bool                    `json:"replace,omitempty"`
	Offset      int64                   `json:"offset"`
	Received    int64                   `json:"received"` // bytes the controllers took in for it, cut chunks included
	MaxChunk    int64                   `json:"max_chunk"`
	CreatedBy   string                  `json:"created_by"`
	CreatedAt   time.Time               `json:"created_at"`
	ExpiresAt   time.Time               `json:"expires_at"`
	CompletedAt *time.Time              `json:"completed_at,omitempty"`
	Result      *protocol.FsWriteResult `json:"result,omitempty"` // once published
}

// UploadList is a workspace's upload sessions (GET …/uploads[?path=P]).
type UploadList struct {
	Uploads []Upload `json:"uploads"`
}
