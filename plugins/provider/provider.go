package provider

import "context"

// Config is what the controller hands a provider once, after loading it.
type Config struct {
	// StateDir is a private directory reserved for this provider
	// (for example DATA/providers/local). The provider owns its contents.
	StateDir string
	// Options are provider specific settings from the operator's config,
	// described by Info.ConfigSchema.
	Options map[string]string
}

// Resources are limits for one allocation. Zero means the provider's default.
type Resources struct {
	CPUs      float64
	MemoryMiB int64
	Pids      int64
}

// CreateRequest asks a provider to start a sandbox running the runner.
type CreateRequest struct {
	WorkspaceID  string
	AllocationID string
	// ControllerURL is the base URL the runner dials, e.g. http://127.0.0.1:7420.
	ControllerURL string
	// RunnerToken is a one-use bootstrap token. Providers pass it to the
	// runner only as the environment variable TETHER_RUNNER_TOKEN and never
	// log it or keep it after the runner has started.
	RunnerToken string
	// RunnerBinary is the absolute path, on the controller host, of the
	// static tether-runner binary. Create installs it as InstallRunner does.
	RunnerBinary string
	// Env is extra environment for the runner.
	Env       map[string]string
	Resources Resources
	// Labels are recorded on the sandbox where the provider can (container
	// labels). Keys starting with "tether." are the provider's own.
	Labels map[string]string
	// Options override the configured options for this allocation; the keys
	// are those of the config schema.
	Options map[string]string
	// ControllerSocket is the host path of a unix socket on which the
	// controller serves the runner endpoint (/v1/runners/connect) and
	// nothing else; empty when it has none. A provider whose sandbox cannot
	// reach ControllerURL (a private network) may give the runner this
	// socket instead, for example by bind-mounting its directory, and set
	// TETHER_CONTROLLER_URL=unix://<its path in the sandbox>. Only the
	// runner may reach it: the agent must not.
	ControllerSocket string
}

// StartRequest restarts the runner of a stopped allocation.
type StartRequest struct {
	AllocationID string
	// RunnerToken is a fresh one-use bootstrap token: the one given to
	// Create was spent by the first runner.
	RunnerToken string
	// ControllerURL, when set, replaces the URL given to Create.
	ControllerURL string
}

// Allocation describes a started sandbox.
type Allocation struct {
	ID string
	// Root is the workspace root path as seen inside the sandbox.
	Root string
	// Info is provider specific, human oriented detail (pid, container id...).
	Info map[string]string
}

// State is where an allocation is in its life.
type State string

// Allocation states reported by Inspect.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopped  State = "stopped" // sandbox and files kept, runner not running
	StateArchived State = "archived"
	StateGone     State = "gone" // never existed here, or destroyed
)

// Status is what Inspect reports.
type Status struct {
	State  State
	Reason string
}

// Endpoint is how to reach a port inside a sandbox.
type Endpoint struct {
	URL     string
	Headers map[string]string
}

// Info identifies a provider.
type Info struct {
	Name         string
	Version      string
	Capabilities []string
	// ConfigSchema is a JSON Schema document (an object with string
	// properties) for Config.Options and CreateRequest.Options.
	ConfigSchema string
}

// Capabilities a provider may report in Info.
const (
	CapStart         = "start"
	CapStop          = "stop"
	CapArchive       = "archive"
	CapEndpoint      = "endpoint"
	CapInstallRunner = "install_runner"
	CapResources     = "resources" // Resources are enforced
	CapIsolation     = "isolation" // the sandbox is isolated from the host
	// CapHostLocal: a sandbox lives on the host of the controller that made it, and only that
	// controller can stop, destroy or export it (in a cluster, others forward to it).
	CapHostLocal = "host_local"
)

// Base is what every plugin answers: who it is and how it is configured.
type Base interface {
	Info(ctx context.Context) (Info, error)
	// ValidateConfig checks cfg (unknown options, bad values) without
	// adopting it; it fails with CodeInvalidArgument.
	ValidateConfig(ctx context.Context, cfg Config) error
	// Configure validates and adopts cfg. The host calls it once, before
	// any other Provider method.
	Configure(ctx context.Context, cfg Config) error
}

// Provider creates and tears down sandboxes. Methods return *Error for
// failures the controller should tell apart; any other error crosses the
// plugin boundary as CodeProviderFailed.
//
// A provider acts only on sandboxes it created itself (its own labels, its
// own state dir): an allocation id naming anything else is refused with
// CodeForeign, an unknown one with CodeNotFound. Malformed ids fail with
// CodeInvalidArgument.
type Provider interface {
	Base
	// Create makes the sandbox, installs the runner and starts it, and
	// returns once its process has started; the controller observes
	// readiness itself when the runner dials in. An id in use is
	// CodeConflict. A failed Create leaves nothing behind.
	Create(ctx context.Context, req CreateRequest) (Allocation, error)
	// Inspect reports the allocation's state; an unknown id is StateGone.
	Inspect(ctx context.Context, allocationID string) (Status, error)
	// Start restarts the runner of a stopped allocation, in the sandbox and
	// files it had. A running allocation is CodeConflict.
	Start(ctx context.Context, req StartRequest) error
	// Stop stops the runner and everything it started, and keeps the
	// sandbox and its files for Start. Idempotent on a stopped allocation.
	Stop(ctx context.Context, allocationID string) error
	// Archive moves a stopped allocation to cheaper storage; providers
	// without it return CodeUnsupported.
	Archive(ctx context.Context, allocationID string) error
	// Destroy stops the allocation and removes all its sandbox state.
	// Idempotent: an unknown allocation is not an error.
	Destroy(ctx context.Context, allocationID string) error
	// Endpoint says how to reach port inside the sandbox.
	Endpoint(ctx context.Context, allocationID string, port int) (Endpoint, error)
	// InstallRunner copies the static runner at runnerBinary (a host path)
	// into the sandbox, replacing the one there; the next Start runs it. A
	// provider whose sandbox is the host itself (local) records the path.
	InstallRunner(ctx context.Context, allocationID, runnerBinary string) error
}

// ExportRequest asks a provider to copy an allocation's workspace files out
// to the host.
type ExportRequest struct {
	AllocationID string
	// Dest is an absolute directory on the host; it is created if missing.
	Dest string
	// MaxBytes bounds the bytes this call copies (> 0); more is CodeTooLarge.
	MaxBytes int64
}

// ExportResult is what an export copied.
type ExportResult struct {
	// Files and Bytes count the files published into Dest by this call.
	Files int
	Bytes int64
	// Skipped are host files newer than the sandbox's, left as they were
	// (slash separated, relative to Dest).
	Skipped []string
}

// Exporter is implemented by providers that can copy a workspace's files
// out through their own API (for a runner that cannot connect).
//
// ExportFiles is a guarded copy: each file streams into a temp file beside
// its target and is renamed into place only when no host file is there or
// the host file is older than the sandbox's; newer host files are kept and
// listed in Skipped. A failure removes every temp file the call made, keeps
// the files it already published (each complete), and returns a typed
// error; calling again once the fault clears completes the copy. Providers
// that cannot export return CodeUnsupported.
//
// It is a separate interface so hosts that wrap a Provider keep compiling;
// *Client implements it (a plugin without the RPC answers unsupported).
type Exporter interface {
	ExportFiles(ctx context.Context, req ExportRequest) (ExportResult, error)
}

// Environment variables a provider sets for the runner it starts.
const (
	EnvControllerURL = "TETHER_CONTROLLER_URL"
	EnvRunnerToken   = "TETHER_RUNNER_TOKEN"
	EnvAllocationID  = "TETHER_ALLOCATION_ID"
	EnvWorkspaceID   = "TETHER_WORKSPACE_ID"
	EnvWorkspaceRoot = "TETHER_WORKSPACE_ROOT"
	// EnvIsolation tells the runner how to keep the agent's processes apart
	// from itself (IsolationUID: as EnvAgentUID:EnvAgentGID); the same names
	// as the protocol package's.
	EnvIsolation = "TETHER_ISOLATION"
	EnvAgentUID  = "TETHER_AGENT_UID"
	EnvAgentGID  = "TETHER_AGENT_GID"
	// EnvUsageSource tells the runner where to measure its sandbox's CPU and
	// memory: "cgroup" when the sandbox is a cgroup of its own (a container),
	// else (unset) its process tree in /proc.
	EnvUsageSource = "TETHER_USAGE_SOURCE"
)

// IsolationUID (EnvIsolation): the runner runs agent processes as an
// unprivileged uid apart from its own.
const IsolationUID = "uid"

// Labels a provider puts on the sandboxes it owns.
const (
	LabelWorkspace  = "tether.workspace"
	LabelAllocation = "tether.allocation"
)
