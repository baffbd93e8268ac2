package protocol

import "time"

// Artifact operations. Both are opened by the RUNNER on its connection to the controller.
const (
	// OpArtifactFetch asks for an artifact's bytes. Header.Epoch is the runner's current writer
	// epoch; Args is ArtifactFetchArgs. The controller answers with a reply trailer (Result:
	// ArtifactInfo, or an error: not_found — for a missing id and another workspace's alike, in
	// the same words —, revoked, stale_epoch), then a body (aborted with `revoked` if the artifact is revoked
	// mid-transfer), then a final trailer.
	OpArtifactFetch = "artifact_fetch"
	// OpArtifactInstalled records an install (Args: ArtifactInstall) so `tether run ls` shows it.
	OpArtifactInstalled = "artifact_installed"
)

// Error codes of artifact installs.
const (
	CodeDigestMismatch Code = "digest_mismatch"
)

// ArtifactFetchArgs names the artifact to fetch.
type ArtifactFetchArgs struct {
	ArtifactID string `json:"artifact_id"`
}

// ArtifactInfo is what the controller's record says of an artifact: the runner checks the bytes
// it receives against it before publishing them.
type ArtifactInfo struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Untrusted bool   `json:"untrusted"` // always true
}

// ArtifactInstall is one installed artifact, as the agent-side tool reports it.
type ArtifactInstall struct {
	ArtifactID  string    `json:"artifact_id"`
	Path        string    `json:"path"`
	Bytes       int64     `json:"bytes"`
	SHA256      string    `json:"sha256"`
	Untrusted   bool      `json:"untrusted"`
	Replayed    bool      `json:"replayed"`
	InstalledAt time.Time `json:"installed_at"`
}

// EnvSocket names the runner's agent socket inside a sandbox.
const EnvSocket = "TETHER_SOCKET"

// AgentRequest is one request on the runner's agent socket (one JSON line each way).
type AgentRequest struct {
	Op         string `json:"op"` // "artifact_download"
	ArtifactID string `json:"artifact_id"`
	Dest       string `json:"dest"` // workspace-relative
}

// AgentResponse answers an AgentRequest.
type AgentResponse struct {
	Install *ArtifactInstall `json:"install,omitempty"`
	Error   *Error           `json:"error,omitempty"`
}
