package api

import (
	"encoding/json"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// WorkspaceState is the state of a workspace, as the API shows it and the store keeps it. Which
// state may follow which is controller/wsstate's table, and only the store's TransitionWorkspace
// moves a workspace along it.
type WorkspaceState string

// Workspace states.
const (
	StateProvisioning WorkspaceState = "provisioning"
	StateReady        WorkspaceState = "ready"
	StateFailed       WorkspaceState = "failed"
	StateClosing      WorkspaceState = "closing"
	StateClosed       WorkspaceState = "closed"
	StateReopening    WorkspaceState = "reopening"
	StateDeleted      WorkspaceState = "deleted"
	// StateReclaiming: a closed workspace whose superseded storage a gc sweep is removing. A
	// sweep interrupted here is finished by the next one; a reopen waits for it.
	StateReclaiming WorkspaceState = "reclaiming"
	// StateLost: the provider reported the sandbox gone (destroyed outside Tether) while the
	// work since the last receipt was unsaved. Only a recover or a delete leaves it.
	StateLost WorkspaceState = "lost"
	// StateRecovering: a recover is rebuilding a lost workspace on a fresh allocation.
	StateRecovering WorkspaceState = "recovering"
	// StateStopping: a stop is ending the workspace's runs and services and having its provider
	// stop the sandbox, which keeps its files.
	StateStopping WorkspaceState = "stopping"
	// StateStopped: the sandbox is stopped and kept, with its files (unsaved work included) and
	// its allocation; nothing runs in it. Start resumes it.
	StateStopped WorkspaceState = "stopped"
	// StateStarting: a start had the provider start the kept sandbox and waits for its runner.
	StateStarting WorkspaceState = "starting"
)

// Workspace is a durable unit of work.
type Workspace struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Provider     string         `json:"provider"`
	State        WorkspaceState `json:"state"`
	Reason       string         `json:"reason,omitempty"` // why it failed
	AllocationID string         `json:"allocation_id"`
	Root         string         `json:"root,omitempty"` // workspace root inside the sandbox
	Connected    bool           `json:"connected"`      // the runner is connected right now
	Epoch        uint64         `json:"epoch"`          // the writer epoch: grows with every lease and reopen
	// Git is set for a project workspace: its project, mode, branch and base.
	Git *WorkspaceGit `json:"git,omitempty"`
	// AllocationInfo is what the provider said of the current allocation's sandbox: for Docker
	// its container, network, limits and isolation.
	AllocationInfo map[string]string `json:"allocation_info,omitempty"`
	// ReclaimedAt is when a gc sweep last reclaimed the closed workspace's superseded storage.
	ReclaimedAt *time.Time `json:"reclaimed_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	// CheckpointEvery is the workspace's own checkpoint interval: nil follows the controller's
	// default (tether serve --checkpoint-every), 0 is off. CheckpointInterval is the one in force
	// (0: no automatic checkpoints); LastCheckpointAt is when a checkpoint last looked at the
	// workspace, whether or not it wrote a receipt.
	CheckpointEvery    *protocol.Duration `json:"checkpoint_every,omitempty"`
	CheckpointInterval protocol.Duration  `json:"checkpoint_interval"`
	LastCheckpointAt   *time.Time         `json:"last_checkpoint_at,omitempty"`
	// SourceDir is the host directory a workspace was made from (workspace create --source),
	// as the operator's CLI named it; SourceBase the receipt of what the workspace received
	// from it, the base workspace pull compares both sides with.
	SourceDir  string `json:"source_dir,omitempty"`
	SourceBase string `json:"source_base,omitempty"`
	// Parent is set for a child (workspace create --from, or a fork): the workspace and the
	// receipt it continues.
	Parent *WorkspaceParent `json:"parent,omitempty"`
	// IdlePolicy is the workspace's own idle policy: nil follows the controller's default
	// (tether serve --idle-stop/--idle-close), action "off" turns it off. Idle is the policy in
	// force (nil: none); LastActivityAt is the last activity the store knows of (runs, service
	// connections, file operations; flushed every few seconds, so it may lag a little).
	IdlePolicy     *IdlePolicy `json:"idle_policy,omitempty"`
	Idle           *IdlePolicy `json:"idle,omitempty"`
	LastActivityAt *time.Time  `json:"last_activity_at,omitempty"`
	// Usage is the latest resource usage the workspace's runner reported to the controller that
	// answered (kept in its memory; absent until the first report, and when not connected).
	Usage *WorkspaceUsage `json:"usage,omitempty"`
}

// WorkspaceUsage is a sample of a workspace's sandbox: CPU over the runner's last sampling
// interval in percent of one CPU, memory in use, and the bytes its files take on disk.
type WorkspaceUsage struct {
	CPUPercent  float64   `json:"cpu_percent"`
	MemoryBytes int64     `json:"memory_bytes"`
	DiskBytes   int64     `json:"disk_bytes"`
	SampledAt   time.Time `json:"sampled_at"`
}

// Idle policy actions: what happens to a ready workspace with no activity for IdlePolicy.After.
const (
	IdleStop  = "stop"  // stop and retain the sandbox (workspace start resumes it)
	IdleClose = "close" // save and release (workspace reopen restores it)
	IdleOff   = "off"   // a workspace's own setting only: no idle action, whatever the default
)

// IdlePolicy is an idle action and how long a workspace must be idle before it is taken.
type IdlePolicy struct {
	Action string            `json:"action"`
	After  protocol.Duration `json:"after,omitempty"`
}

// UpdateWorkspaceRequest is the body of PATCH /v1/workspaces/{id}: each field set is changed.
type UpdateWorkspaceRequest struct {
	// CheckpointEvery sets the workspace's checkpoint interval (0: off).
	CheckpointEvery *protocol.Duration `json:"checkpoint_every,omitempty"`
	// CheckpointDefault puts the workspace back on the controller's default interval.
	CheckpointDefault bool `json:"checkpoint_default,omitempty"`
	// IdleStop, IdleClose, IdleDefault and IdleOff set the workspace's idle policy: stop or
	// close after that long without activity, the controller's default, or none. At most one.
	IdleStop    *protocol.Duration `json:"idle_stop,omitempty"`
	IdleClose   *protocol.Duration `json:"idle_close,omitempty"`
	IdleDefault bool               `json:"idle_default,omitempty"`
	IdleOff     bool               `json:"idle_off,omitempty"`
}

// ForkRequest is the body of POST /v1/workspaces/{id}/fork.
type ForkRequest struct {
	Count int `json:"count,omitempty"` // default 1
	// From is a receipt of the workspace to fork from; empty takes a fresh checkpoint (or the
	// newest receipt when the tree did not change since).
	From       string `json:"from,omitempty"`
	Provider   string `json:"provider,omitempty"`    // default: the workspace's provider
	NamePrefix string `json:"name_prefix,omitempty"` // default: the workspace's name + "-fork"
}

// ForkResult is what a fork made: every workspace, ready, from one receipt.
type ForkResult struct {
	Snapshot   Snapshot    `json:"snapshot"`
	Workspaces []Workspace `json:"workspaces"`
}

// CreateWorkspaceRequest is the body of POST /v1/workspaces.
type CreateWorkspaceRequest struct {
	Name     string `json:"name,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Project makes a Git workspace of that project (id or name); Mode overrides the project's
	// mode, Branch names the branch; Provision and Teardown add to the project's commands.
	Project   string   `json:"project,omitempty"`
	Mode      string   `json:"mode,omitempty"`
	Branch    string   `json:"branch,omitempty"`
	Provision []string `json:"provision,omitempty"`
	Teardown  []string `json:"teardown,omitempty"`
	// Options are passed to the provider for this workspace's sandbox (see `tether provider ls`).
	Options map[string]string `json:"options,omitempty"`
	// CheckpointEvery is the workspace's checkpoint interval (0: off; unset: the controller's
	// default).
	CheckpointEvery *protocol.Duration `json:"checkpoint_every,omitempty"`
	// FromWorkspace makes a child of that workspace (id or name): a new workspace, with its
	// own allocation, lease and epoch, that continues the parent's files (and Git state, on a
	// branch of its own) from the parent's last receipt, or from FromSnapshot, a receipt of the
	// parent. WaitForSave waits first, once, for the parent's next receipt (a checkpoint,
	// snapshot or close made after the request arrived), at most WaitTimeout (default 10m).
	FromWorkspace string             `json:"from_workspace,omitempty"`
	FromSnapshot  string             `json:"from_snapshot,omitempty"`
	WaitForSave   bool               `json:"wait_for_save,omitempty"`
	WaitTimeout   *protocol.Duration `json:"wait_timeout,omitempty"`
	// IdleStop or IdleClose (not both) is the workspace's idle policy: stop or close it after
	// that long without activity (unset: the controller's default).
	IdleStop  *protocol.Duration `json:"idle_stop,omitempty"`
	IdleClose *protocol.Duration `json:"idle_close,omitempty"`
}

// WorkspaceParent is where a child workspace came from: its parent and the receipt of the
// parent it continues.
type WorkspaceParent struct {
	Workspace string `json:"workspace"`
	Snapshot  string `json:"snapshot"`
}

// Run states.
const (
	RunRunning = "running"
	RunExited  = "exited"
	RunFailed  = "failed" // could not start, or the runner failed it
	RunLost    = "lost"   // the runner no longer knows the run
)

// Run is one dispatched command.
type Run struct {
	ID           string     `json:"id"`
	WorkspaceID  string     `json:"workspace_id"`
	AllocationID string     `json:"allocation_id"`
	Argv         []string   `json:"argv"`
	Cwd          string     `json:"cwd,omitempty"`
	Epoch        uint64     `json:"epoch"`
	State        string     `json:"state"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Signal       int        `json:"signal,omitempty"`
	Error        string     `json:"error,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
	// Kind is "provision" or "teardown" for a project's commands the controller ran; "" for a
	// dispatched command.
	Kind string `json:"kind,omitempty"`
	// Output is the tail (at most 64 KiB) of stdout and stderr, kept for provision and teardown.
	Output string `json:"output,omitempty"`
	// IdempotencyKey is the key the run was started with: a repeat of the same key and argv in
	// the workspace is this run, never a second process.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Log is what the runner's log of the run holds (each stream's size and the range still
	// held), when its runner is connected; not stored.
	Log *protocol.RunOutput `json:"log,omitempty"`
}

// Lease is the single right to mutate a workspace. Its epoch is the fencing token every
// mutating call carries; it only grows.
type Lease struct {
	WorkspaceID string    `json:"workspace_id"`
	Holder      string    `json:"holder"`
	Epoch       uint64    `json:"epoch"`
	AcquiredAt  time.Time `json:"acquired_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// LeaseRequest is the body of POST (acquire) and PUT (renew) /v1/workspaces/{id}/lease.
type LeaseRequest struct {
	Holder string `json:"holder,omitempty"`
	TTL    string `json:"ttl,omitempty"`  // duration, default 5m
	Wait   string `json:"wait,omitempty"` // acquire: how long to wait for a held lease
	Epoch  uint64 `json:"epoch,omitempty"`
}

// Event is one recorded state transition of a workspace.
type Event struct {
	At    time.Time      `json:"at"`
	From  WorkspaceState `json:"from,omitempty"`
	To    WorkspaceState `json:"to"`
	Cause string         `json:"cause"`
}

// Health answers GET /healthz (200 "ok", or 503 when the controller could not write its heartbeat).
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	ID      string `json:"id"`
}

// ErrorBody is every non-2xx response body.
type ErrorBody struct {
	Error protocol.Error `json:"error"`
}

// TreeImportResult answers PUT /v1/workspaces/{id}/tree.
type TreeImportResult = protocol.TreeImportResult

// Snapshot is a receipt: the controller's record that an archive is stored complete and
// verified. No receipt, no snapshot.
type Snapshot struct {
	ID          string                   `json:"id"`
	WorkspaceID string                   `json:"workspace_id"`
	Epoch       uint64                   `json:"epoch"`
	Parent      string                   `json:"parent,omitempty"`
	ObjectKey   string                   `json:"object_key"`
	Bytes       int64                    `json:"bytes"`  // stored object size
	SHA256      string                   `json:"sha256"` // of the stored object
	Encrypted   bool                     `json:"encrypted"`
	Entries     int                      `json:"entries"`
	Git         json.RawMessage          `json:"git,omitempty"`
	Summary     protocol.SnapshotSummary `json:"manifest"`
	CreatedAt   time.Time                `json:"created_at"`
	// Layers are the objects of earlier captures whose bytes this receipt's tree uses (an
	// incremental capture stores only what changed); ManifestKey is the object holding the
	// receipt's whole manifest with where each entry's bytes are. Both are empty for a full
	// snapshot, whose ObjectKey alone holds everything. An object is needed while any live
	// receipt names it in ObjectKey, ManifestKey or Layers.
	Layers      []string `json:"layers,omitempty"`
	ManifestKey string   `json:"manifest_key,omitempty"`
	// ReclaimedAt: a gc sweep deleted the object of this superseded receipt (a newer receipt of
	// the same workspace holds its work); the record stays as history.
	ReclaimedAt *time.Time `json:"reclaimed_at,omitempty"`
	// Checkpoint: the controller took this receipt on its own (an automatic checkpoint, or the
	// fresh one a fork starts from).
	Checkpoint bool `json:"checkpoint,omitempty"`
}

// CaptureOptions are the options of POST /v1/workspaces/{id}/snapshots (query parameters).
type CaptureOptions struct {
	// Full reads and stores every file again instead of referring to the last receipt's bytes
	// (what a chain of incremental receipts is compacted by; also the bench's full capture).
	Full bool `json:"full,omitempty"`
}

// RestoreRequest is the body of POST /v1/snapshots/{id}/restore.
type RestoreRequest struct {
	Name     string            `json:"name,omitempty"`
	Provider string            `json:"provider,omitempty"`
	Options  map[string]string `json:"options,omitempty"`
}

// RestoreResult answers a restore: the new workspace and the snapshot it holds.
type RestoreResult struct {
	Workspace Workspace `json:"workspace"`
	Snapshot  Snapshot  `json:"snapshot"`
}

// VerifyResult answers POST /v1/snapshots/{id}/verify.
type VerifyResult struct {
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// CloseCheck answers whether a workspace can close now and what closing would do.
type CloseCheck struct {
	Ready          bool `json:"ready"`
	PendingChanges bool `json:"pending_changes"` // the tree differs from the last receipt
	ActiveRuns     int  `json:"active_runs"`
	// ActiveServices are not over yet: close stops them, verified, before its final capture.
	ActiveServices int      `json:"active_services"`
	LastSnapshot   string   `json:"last_snapshot,omitempty"`
	Reasons        []string `json:"reasons"`
}

// CloseRequest is the body of POST /v1/workspaces/{id}/close.
type CloseRequest struct {
	Check      bool `json:"check,omitempty"`       // only report, change nothing
	CancelRuns bool `json:"cancel_runs,omitempty"` // close even with runs still going (they are killed)
}

// CloseResult answers a close: the closed workspace and the snapshot that holds its work.
type CloseResult struct {
	Workspace Workspace `json:"workspace"`
	Snapshot  *Snapshot `json:"snapshot,omitempty"` // captured by this close, when there were changes
	Saved     string    `json:"saved_in"`           // the receipt the workspace reopens from
	// StoppedRuns and StoppedServices count what close stopped before its final capture.
	StoppedRuns     int `json:"stopped_runs"`
	StoppedServices int `json:"stopped_services"`
}

// ReopenRequest is the body of POST /v1/workspaces/{id}/reopen.
type ReopenRequest struct {
	Provider string `json:"provider,omitempty"`
}

// RecoverRequest is the body of POST /v1/workspaces/{id}/recover: rebuild a lost workspace on a
// fresh allocation from one of its own receipts.
type RecoverRequest struct {
	// From is the receipt of this workspace to recover from; empty: its newest.
	From string `json:"from,omitempty"`
	// Note is the operator's word on the decision, recorded with it (at most 1024 bytes of
	// printable text).
	Note string `json:"note,omitempty"`
	// Empty recovers a workspace that has no receipt at all from an empty tree; without it such
	// a recover is refused.
	Empty bool `json:"empty,omitempty"`
}

// ExportRequest is the body of POST /v1/workspaces/{id}/export.
type ExportRequest struct {
	Dest     string `json:"dest"` // absolute directory on the controller's host
	MaxBytes int64  `json:"max_bytes"`
}

// ExportResult says what an export copied and which newer host files it left alone.
type ExportResult struct {
	Files   int      `json:"files"`
	Bytes   int64    `json:"bytes"`
	Skipped []string `json:"skipped"`
}

// Artifact is a blob of saved bytes owned by a workspace, content-addressed in the blob store.
// Artifacts are always untrusted; nothing changes that label.
type Artifact struct {
	ID          string     `json:"id"`
	WorkspaceID string     `json:"owner"`
	Name        string     `json:"name,omitempty"`
	Bytes       int64      `json:"bytes"`
	SHA256      string     `json:"sha256"`
	ObjectKey   string     `json:"object_key"`
	Untrusted   bool       `json:"untrusted"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
}

// Service is a long-running process a workspace's runner supervises, as last observed.
type Service struct {
	WorkspaceID string           `json:"workspace_id"`
	Name        string           `json:"name"`
	State       string           `json:"state"` // starting, ready, stopping, stopped, failed
	Reason      string           `json:"reason,omitempty"`
	Port        int              `json:"port,omitempty"`
	Restarts    int              `json:"restarts"`
	PID         int              `json:"pid,omitempty"`
	StderrTail  string           `json:"stderr_tail,omitempty"`
	LogEnd      int64            `json:"log_end"`
	Argv        []string         `json:"argv,omitempty"`
	StartedAt   *time.Time       `json:"started_at,omitempty"`
	ReadyAt     *time.Time       `json:"ready_at,omitempty"`
	StoppedAt   *time.Time       `json:"stopped_at,omitempty"`
	UpdatedAt   time.Time        `json:"updated_at"`
	Endpoint    *ServiceEndpoint `json:"endpoint,omitempty"`
}

// ServiceEndpoint is where a ready service is reached: URL through the controller's proxy (the
// runner dials the service inside the sandbox), with the headers that needs; DirectURL is the
// provider's own address of the port, when it has one (it may be unreachable from outside the
// sandbox: a service bound to its loopback, a private network). Nothing is sent into the
// service to answer this.
type ServiceEndpoint struct {
	URL string `json:"url"`
	// Headers name what a request to URL needs, not its secret: the Authorization header's value
	// is a placeholder for the caller's own operator or API token.
	Headers       map[string]string `json:"headers"`
	Port          int               `json:"port"`
	DirectURL     string            `json:"direct_url,omitempty"`
	DirectHeaders map[string]string `json:"direct_headers,omitempty"`
	Hint          string            `json:"hint,omitempty"`
}

// RunSignalRequest is the body of POST /v1/runs/{id}/signal: a signal's name (TERM, SIGTERM)
// or number, as a JSON string or number.
type RunSignalRequest struct {
	Signal json.RawMessage `json:"signal"`
}
