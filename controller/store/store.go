package store

import (
	"context"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
)

// Allocation states.
const (
	AllocStarting     = "starting"
	AllocConnected    = "connected"
	AllocDisconnected = "disconnected"
	AllocFailed       = "failed"
	AllocDestroyed    = "destroyed"
	// AllocStopped: the provider stopped the sandbox and keeps it (workspace stop); no runner is
	// admitted until RestartAllocation.
	AllocStopped = "stopped"
)

// Allocation is one sandbox serving a workspace.
type Allocation struct {
	ID            string
	WorkspaceID   string
	Provider      string
	State         string
	Root          string
	BootstrapHash string // SHA-256 of the one-use bootstrap token
	BootstrapUsed bool
	// SessionHash is the SHA-256 of the session token the runner confirmed it holds;
	// PendingSessionHash that of the one the last welcome carried, until the runner confirms it
	// or presents it. Together they are the only tokens that admit a runner (see RotateSession).
	SessionHash        string
	PendingSessionHash string
	RunnerVersion      string
	// Owner is the controller (Member.ID) that holds the runner's connection, since OwnerSince;
	// empty while no controller does. Only ClaimAllocation sets it.
	Owner      string
	OwnerSince time.Time
	// PlacedOn is the controller that provisioned the sandbox: a provider whose sandboxes only
	// their host can reach (local) is called there. ReadyBy is when the runner must have
	// connected by (zero: no deadline); any live controller enforces it once it passed.
	PlacedOn string
	ReadyBy  time.Time
	// StoppedTree is the tree digest of the workspace when a stop stopped the sandbox ("" when it
	// could not be read): reads of the stopped workspace serve its last receipt only when that
	// receipt's tree is this one.
	StoppedTree string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Store is the controller's state: every role below, on one database. Every method is safe for
// concurrent use. Lookups of missing records return a *protocol.Error with CodeNotFound.
type Store interface {
	Workspaces
	Events
	Allocations
	Sessions
	Runs
	Snapshots
	Leases
	Artifacts
	Services
	Projects
	Members
	Tokens
	Previews
	UploadSessions
	Coordination

	Close() error
}

// Workspaces keeps workspace records and their state. Every change of state is recorded as an
// event (see Events).
type Workspaces interface {
	// CreateWorkspace records a workspace together with its first allocation, which becomes
	// current (CodeExists when a live workspace has its name; CodeConflict when a project
	// workspace's branch already has a live one). The controller creates it in wsstate.Initial;
	// a state wsstate does not know is CodeInvalidArgument.
	CreateWorkspace(ctx context.Context, w api.Workspace, a Allocation) error
	// GetWorkspace finds a workspace by id, or by the name of a live one.
	GetWorkspace(ctx context.Context, id string) (api.Workspace, error)
	// ListWorkspaces lists workspaces oldest first, without deleted ones unless all.
	ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error)
	// TransitionWorkspace makes the transition of ev in wsstate's table — the only way a
	// workspace's state changes — if the workspace is in one of ev's from states, atomically: it
	// sets the state ev leads to and reason, and records the event with its cause. From any other
	// state it is CodeConflict naming the current state, and nothing changes.
	TransitionWorkspace(ctx context.Context, id string, ev wsstate.Event, reason, cause string) error
	// SetWorkspaceReclaimed records when a sweep reclaimed the workspace.
	SetWorkspaceReclaimed(ctx context.Context, id string, at time.Time) error
	// SetCheckpointEvery sets the workspace's own checkpoint interval (nil: the controller's
	// default; 0: off); SetCheckpointChecked records when a checkpoint last looked at it. Neither
	// changes updated_at.
	SetCheckpointEvery(ctx context.Context, id string, every *time.Duration) error
	SetCheckpointChecked(ctx context.Context, id string, at time.Time) error
	// SetIdlePolicy sets the workspace's own idle policy (nil: the controller's default);
	// TouchWorkspaces moves each workspace's last activity forward to its time (never back;
	// unknown ids skipped). Neither changes updated_at.
	SetIdlePolicy(ctx context.Context, id string, p *api.IdlePolicy) error
	TouchWorkspaces(ctx context.Context, at map[string]time.Time) error
	// SetWorkspaceGit replaces the workspace's Git record (CodeConflict when its branch already
	// has another live workspace in the project).
	SetWorkspaceGit(ctx context.Context, id string, g *api.WorkspaceGit) error
	// SetWorkspaceSource records the host directory a workspace was made from and the receipt
	// of what it received (the base of workspace pull). Set once: CodeConflict after that.
	SetWorkspaceSource(ctx context.Context, id, dir, baseSnapshot string) error
	// AdvanceSourceBase moves the base from one receipt to another (a pull that brought
	// everything back), only while it is still from: CodeConflict otherwise.
	AdvanceSourceBase(ctx context.Context, id, from, to string) error
	// SetWorkspaceParent records that a child workspace continues parent from the parent's
	// receipt snapshot. Set once: CodeConflict after that.
	SetWorkspaceParent(ctx context.Context, id, parent, snapshot string) error
}

// Events is a workspace's history: the transitions Workspaces records, and what else happened
// to it.
type Events interface {
	// ListEvents returns a workspace's transitions, oldest first.
	ListEvents(ctx context.Context, workspaceID string) ([]api.Event, error)
	// RecordEvent records something that happened to a workspace without changing its state (a
	// refused runner connection, say): the event's from and to are both its current state.
	RecordEvent(ctx context.Context, workspaceID, cause string) error
}

// Allocations keeps the sandboxes that serve workspaces: at most one current per workspace.
type Allocations interface {
	// AddAllocation records a new allocation for an existing workspace and makes it current.
	AddAllocation(ctx context.Context, a Allocation) error
	GetAllocation(ctx context.Context, id string) (Allocation, error)
	// UpdateAllocation moves an allocation to state, and records its root and runner version
	// when not empty. An allocation never leaves a final state (destroyed; failed, except to
	// destroyed): that is CodeConflict.
	UpdateAllocation(ctx context.Context, id, state, root, runnerVersion string) error
	// SetStartingRoot records the root a provider gave an allocation's sandbox, only while the
	// allocation is still starting: its runner may connect (and be claimed, with the root its
	// hello gives) before the provider's create returns, and a claim is never undone by it.
	SetStartingRoot(ctx context.Context, id, root string) error
	// SetAllocationInfo records what the provider said of an allocation's sandbox (its network,
	// limits, isolation), replacing what was recorded; AllocationInfo returns it (empty if none).
	SetAllocationInfo(ctx context.Context, id string, info map[string]string) error
	AllocationInfo(ctx context.Context, id string) (map[string]string, error)
	// ClaimAllocation records that controller now holds the allocation's runner connection:
	// state connected, root and runner version (when not empty), Owner = controller, OwnerSince
	// = now. A final state (destroyed, failed) is CodeConflict, as in UpdateAllocation.
	ClaimAllocation(ctx context.Context, id, controller, root, runnerVersion string) error
	// ReleaseAllocation makes a connected allocation that controller owns disconnected, with no
	// owner, and reports whether it did: an allocation another controller claimed meanwhile is
	// left as it is.
	ReleaseAllocation(ctx context.Context, id, controller string) (bool, error)
	// DisownAllocations releases every connected allocation controller owns (its own restart, or
	// a peer that found its heartbeat expired) and returns their ids.
	DisownAllocations(ctx context.Context, controller string) ([]string, error)
	// OverdueAllocations lists the allocations still starting whose ReadyBy is set and before
	// now.
	OverdueAllocations(ctx context.Context, now time.Time) ([]Allocation, error)
	// StopAllocation marks a stopped and kept sandbox's allocation stopped, with tree (see
	// Allocation.StoppedTree), and kills every token that admits its runner in the same update.
	// Idempotent on a stopped allocation; a destroyed or failed one is CodeConflict.
	StopAllocation(ctx context.Context, id, tree string) error
	// RestartAllocation moves a stopped allocation to starting, admitting only the runner that
	// presents the bootstrap token hashing to bootstrapHash, by readyBy (zero: no deadline). Any
	// other state is CodeConflict.
	RestartAllocation(ctx context.Context, id, bootstrapHash string, readyBy time.Time) error
}

// Sessions admits runners: an allocation's one-use bootstrap token and the session tokens that
// replace it, stored as hashes. Both lookups and rotation refuse the runner of a destroyed or
// failed allocation.
type Sessions interface {
	// BootstrapAllocation finds the allocation of a live bootstrap token that no confirmed
	// session has replaced yet, without changing it (CodeUnauthorized / CodeRevoked otherwise).
	BootstrapAllocation(ctx context.Context, h string) (Allocation, error)
	// AllocationBySession finds the live allocation whose confirmed or pending session token
	// hashes to h.
	AllocationBySession(ctx context.Context, h string) (Allocation, error)
	// RotateSession admits a runner of the allocation presenting the token that hashes to
	// presented, and makes newHash the allocation's pending session token, atomically. Presented
	// must be the confirmed session token, the pending one (which the runner now proves it
	// received: it becomes the confirmed one, and the token before it stops working), or the
	// bootstrap token while no session was ever confirmed. Any other token, or one that a
	// concurrent rotation replaced, is CodeUnauthorized; a destroyed or failed allocation
	// CodeRevoked.
	RotateSession(ctx context.Context, allocationID, presented, newHash string) (Allocation, error)
	// ConfirmSession makes the pending session token h the allocation's only token once its
	// runner said it holds it: the token it connected with stops working. It reports false when
	// h is no longer the pending token.
	ConfirmSession(ctx context.Context, allocationID, h string) (bool, error)
}

// RunFinish is how a run ended, for Runs.FinishRun.
type RunFinish struct {
	ID       string
	State    string // api.RunExited, api.RunFailed, api.RunLost, ...
	ExitCode *int   // nil when the run has no exit code (it failed to start, was lost, ...)
	Signal   int    // the signal that ended it, 0 if none
	Error    string // why it failed or was lost, "" if it did not
	At       time.Time
}

// Runs keeps the commands dispatched to workspaces and how they ended.
type Runs interface {
	// CreateRun records a new run. A run whose IdempotencyKey another run of the workspace
	// already has is refused with CodeExists (RunByIdempotencyKey finds that one).
	CreateRun(ctx context.Context, r api.Run) error
	// RunByIdempotencyKey finds the workspace's run started with key (CodeNotFound if none).
	RunByIdempotencyKey(ctx context.Context, workspaceID, key string) (api.Run, error)
	// FinishRun records how a run ended.
	FinishRun(ctx context.Context, f RunFinish) error
	GetRun(ctx context.Context, id string) (api.Run, error)
	// ListRuns lists a workspace's runs, oldest first.
	ListRuns(ctx context.Context, workspaceID string) ([]api.Run, error)
	// RunningRuns lists the runs of an allocation still recorded as running.
	RunningRuns(ctx context.Context, allocationID string) ([]api.Run, error)
	// SetRunOutput keeps a run's kind and output tail.
	SetRunOutput(ctx context.Context, id, kind, output string) error
}

// Snapshots keeps receipts: the record that a snapshot's object is stored and verified. No
// receipt, no snapshot.
type Snapshots interface {
	// CreateSnapshot writes a receipt. Only call it once the object is stored and verified.
	CreateSnapshot(ctx context.Context, s api.Snapshot) error
	// AppendSnapshot writes a capture's receipt as its workspace's newest: only while s.Parent
	// is still the workspace's newest receipt ("" for none) and the workspace is not deleted,
	// else CodeConflict and nothing is written. Its created time is moved after the parent's
	// when a clock says otherwise, and the receipt as written is returned.
	AppendSnapshot(ctx context.Context, s api.Snapshot) (api.Snapshot, error)
	GetSnapshot(ctx context.Context, id string) (api.Snapshot, error)
	// ListSnapshots lists a workspace's receipts, oldest first.
	ListSnapshots(ctx context.Context, workspaceID string) ([]api.Snapshot, error)
	// SnapshotObjectKeys returns every object key a receipt not reclaimed needs: its own, its
	// manifest's and its layers' (the garbage sweep keeps these).
	SnapshotObjectKeys(ctx context.Context) (map[string]bool, error)
	// SnapshotObjectUsers maps the same keys to the workspaces whose receipts need them (each
	// workspace once).
	SnapshotObjectUsers(ctx context.Context) (map[string][]string, error)
	// RemoveSnapshot deletes a receipt and returns it (its objects are left to the sweep). The
	// newest receipt of a workspace that is not deleted is CodeConflict: reopen restores from it.
	RemoveSnapshot(ctx context.Context, id string) (api.Snapshot, error)
	// ReclaimSnapshot marks a receipt's object reclaimed (kept as history; SnapshotObjectKeys no
	// longer lists its key). Marking an already reclaimed receipt keeps the first time.
	ReclaimSnapshot(ctx context.Context, id string, at time.Time) error
}

// Leases keeps each workspace's writer lease and epoch, the fencing token that only grows.
type Leases interface {
	// AcquireLease grants the writer lease with a new epoch unless a live one is held
	// (CodeLeaseHeld). Atomic under any concurrency.
	AcquireLease(ctx context.Context, workspaceID, holder string, ttl time.Duration) (api.Lease, error)
	// RenewLease extends the live lease of that epoch (else CodeStaleEpoch).
	RenewLease(ctx context.Context, workspaceID string, epoch uint64, ttl time.Duration) (api.Lease, error)
	// ReleaseLease ends the live lease of that epoch (else CodeStaleEpoch).
	ReleaseLease(ctx context.Context, workspaceID string, epoch uint64) error
	// CurrentLease returns the live lease, if one is held.
	CurrentLease(ctx context.Context, workspaceID string) (api.Lease, bool, error)
	// BumpEpoch raises the epoch and drops any lease: every earlier writer is fenced.
	BumpEpoch(ctx context.Context, workspaceID string) (uint64, error)
}

// Artifacts keeps the records of bytes the controller saved for agents (always untrusted).
type Artifacts interface {
	// CreateArtifact records an artifact whose bytes are already stored under its object key.
	CreateArtifact(ctx context.Context, a api.Artifact) error
	GetArtifact(ctx context.Context, id string) (api.Artifact, error)
	// ListArtifacts lists a workspace's artifacts, oldest first.
	ListArtifacts(ctx context.Context, workspaceID string) ([]api.Artifact, error)
	// RevokeArtifact marks the artifact revoked at at (the first revocation's time stays) and
	// returns the record.
	RevokeArtifact(ctx context.Context, id string, at time.Time) (api.Artifact, error)
}

// Services keeps the last known status of each workspace's services, for when its runner is
// not connected.
type Services interface {
	// PutService records a service's latest status (keyed by workspace and name).
	PutService(ctx context.Context, svc api.Service) error
	// ListServices lists a workspace's service records by name.
	ListServices(ctx context.Context, workspaceID string) ([]api.Service, error)
}

// Projects keeps projects (a Git source workspaces check out branches of) and finds their
// workspaces.
type Projects interface {
	// CreateProject records a project (CodeExists when its name is taken).
	CreateProject(ctx context.Context, p api.Project) error
	// GetProject finds a project by id or name.
	GetProject(ctx context.Context, idOrName string) (api.Project, error)
	// ListProjects lists projects oldest first.
	ListProjects(ctx context.Context) ([]api.Project, error)
	// ProjectWorkspaces lists a project's workspaces (not deleted ones), oldest first.
	ProjectWorkspaces(ctx context.Context, projectID string) ([]api.Workspace, error)
	// OpenWorkspaceFor finds the project's newest workspace on branch that is not deleted or
	// failed (ok false when there is none).
	OpenWorkspaceFor(ctx context.Context, projectID, branch string) (w api.Workspace, ok bool, err error)
}

// Member is one controller of a cluster as it registers itself.
type Member struct {
	ID          string
	Address     string // base URL peers reach it on (http://host:port)
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time // set by Heartbeat, from the store's clock
}

// Members is the cluster's membership: controllers sharing one store.
type Members interface {
	// Heartbeat records m, inserting or updating it, with HeartbeatAt = now (the store's
	// clock), and returns that time.
	Heartbeat(ctx context.Context, m Member) (time.Time, error)
	GetMember(ctx context.Context, id string) (Member, error)
	// ListMembers lists members by id.
	ListMembers(ctx context.Context) ([]Member, error)
	// RemoveMember forgets a member (it shut down cleanly); missing is not an error.
	RemoveMember(ctx context.Context, id string) error
	// ClusterSecret returns the secret controllers authenticate to each other with, creating
	// it on first use: every caller of one store gets the same one.
	ClusterSecret(ctx context.Context) (string, error)
}

// Token is an API token: a credential for the REST API kept in the store, so every controller
// accepts it. Only its hash is stored.
type Token struct {
	Name       string
	Hash       string   // SHA-256 hex of the secret
	Workspaces []string // workspace ids it is limited to; empty: all
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: not revoked
}

// Tokens keeps API tokens.
type Tokens interface {
	// CreateToken records a token (CodeExists when a token that is not revoked has its name).
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by its hash, revoked and expired ones included (the caller
	// decides); CodeNotFound when there is none.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// ListTokens lists tokens by creation time, revoked ones included.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the live token of that name at at (CodeNotFound when none is live).
	RevokeToken(ctx context.Context, name string, at time.Time) error
}

// Preview is a preview link's token: it lets a browser reach one service of one workspace
// without the operator token, until it expires or is revoked. Only its hash is stored.
type Preview struct {
	ID          string // pv_…, names it in lists (never the secret)
	Hash        string // SHA-256 hex of the secret
	WorkspaceID string
	Service     string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	RevokedAt   time.Time // zero: not revoked
}

// Previews keeps preview tokens.
type Previews interface {
	// CreatePreview records a preview token (its id and hash must be new).
	CreatePreview(ctx context.Context, p Preview) error
	// PreviewByHash finds a preview by its hash, revoked and expired ones included (the caller
	// decides); CodeNotFound when there is none.
	PreviewByHash(ctx context.Context, hash string) (Preview, error)
	// ListPreviews lists a workspace's previews of service by creation time, revoked and
	// expired ones included.
	ListPreviews(ctx context.Context, workspaceID, service string) ([]Preview, error)
	// RevokePreviews revokes every live preview of the service at at (neither revoked nor
	// expired then) and says how many; those already revoked keep their time.
	RevokePreviews(ctx context.Context, workspaceID, service string, at time.Time) (int, error)
	// PurgePreviews forgets the previews that expired or were revoked before before, and says
	// how many.
	PurgePreviews(ctx context.Context, before time.Time) (int, error)
}

// UploadSession is a resumable upload: a file of Size bytes whose whole SHA-256 was declared up
// front, staged by the runner of the workspace chunk by chunk and published when the last byte
// arrived and the digest matched. Any controller of a cluster may continue it; anyone who may
// write to the workspace may (the record names the principal that started it, for the log).
type UploadSession struct {
	ID          string // up_…, random and unguessable
	WorkspaceID string
	Path        string
	Size        int64
	SHA256      string
	Mode        uint32
	Replace     bool
	CreatedBy   string // the principal that started it ("operator" or "API token NAME")
	// Offset is the last offset the runner confirmed (the runner holds the truth); Received
	// counts every byte the controllers took in for it, cut chunks included.
	Offset      int64
	Received    int64
	CreatedAt   time.Time
	ExpiresAt   time.Time
	CompletedAt time.Time // zero: not published yet
}

// UploadSessions keeps resumable upload sessions.
type UploadSessions interface {
	// CreateUploadSession records a new session (its id must be new).
	CreateUploadSession(ctx context.Context, u UploadSession) error
	// GetUploadSession finds a session by id, expired and completed ones included (the caller
	// decides); CodeNotFound when there is none.
	GetUploadSession(ctx context.Context, id string) (UploadSession, error)
	// ListUploadSessions lists a workspace's sessions by creation time; path, when not empty,
	// keeps those of that path.
	ListUploadSessions(ctx context.Context, workspaceID, path string) ([]UploadSession, error)
	// RecordUploadProgress sets a session's confirmed offset, adds received to what it took in,
	// and marks it completed at completed when that is not zero (CodeNotFound when it is gone).
	RecordUploadProgress(ctx context.Context, id string, offset, received int64, completed time.Time) error
	// DeleteUploadSession forgets a session (CodeNotFound when there is none).
	DeleteUploadSession(ctx context.Context, id string) error
	// ExpiredUploadSessions lists up to limit sessions that expired before before, oldest first.
	ExpiredUploadSessions(ctx context.Context, before time.Time, limit int) ([]UploadSession, error)
}

// Coordination is what controllers sharing a store use to take turns and to wake each other.
type Coordination interface {
	// TryClusterLock takes the cluster-wide lock called name if no one holds it, until release
	// is called (PostgreSQL: a session advisory lock on a connection kept for it; SQLite, whose
	// database one controller holds: a lock in the process). ok is false when it is held.
	TryClusterLock(ctx context.Context, name string) (release func(), ok bool, err error)
	// TouchUpload records that controller is writing the blob object key now (its heartbeat);
	// DoneUpload forgets it; LiveUploads lists the keys touched at or after since.
	TouchUpload(ctx context.Context, key, controller string) error
	DoneUpload(ctx context.Context, key string) error
	LiveUploads(ctx context.Context, since time.Time) (map[string]bool, error)
	// WatchAllocations delivers the id of every allocation whose record ClaimAllocation,
	// ReleaseAllocation, DisownAllocations or UpdateAllocation changed, by any controller of
	// the store (PostgreSQL: LISTEN/NOTIFY; SQLite: in the process), until ctx ends. Delivery
	// is best effort (a slow reader or a lost database connection can miss some): a waiter
	// re-reads the record, and re-reads it now and then anyway.
	WatchAllocations(ctx context.Context) (<-chan string, error)
}
