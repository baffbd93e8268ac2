package protocol

import "fmt"

// Protocol versions this build speaks. A runner and a controller agree on the highest version
// both support; a runner from an older release keeps working while its range overlaps.
//
// Version 2 frames bodies with a CRC-32C per chunk instead of a SHA-256 of the whole body
// (body.go); a version-1 runner is refused with unsupported rather than misread.
const (
	ProtocolMin = 2
	ProtocolMax = 2
)

// ConnectPath is where runners dial the controller.
const ConnectPath = "/v1/runners/connect"

// Environment the provider sets for the runner.
const (
	EnvControllerURL = "TETHER_CONTROLLER_URL"
	EnvRunnerToken   = "TETHER_RUNNER_TOKEN"
	EnvAllocationID  = "TETHER_ALLOCATION_ID"
	EnvWorkspaceID   = "TETHER_WORKSPACE_ID"
	EnvWorkspaceRoot = "TETHER_WORKSPACE_ROOT"
	// EnvIsolation says how the runner confines the agent's processes: IsolationNamespaces,
	// IsolationUID or IsolationNone (the default when unset, for a runner started by hand).
	EnvIsolation = "TETHER_ISOLATION"
	// EnvAgentUID and EnvAgentGID are the ids agent processes run as (for IsolationUID, in the
	// sandbox's own id space; for IsolationNamespaces, on the host, when the runner is root).
	EnvAgentUID = "TETHER_AGENT_UID"
	EnvAgentGID = "TETHER_AGENT_GID"
	// EnvSandboxDir is, for IsolationNamespaces, a provider-made directory beside the workspace
	// holding the agent's tmp/ and home/ and an empty mnt/.
	EnvSandboxDir = "TETHER_SANDBOX_DIR"
	// EnvUsageSource is "cgroup" when the runner's cgroup is its sandbox's alone (a container):
	// usage reports then read it; otherwise they sum the runner's process tree from /proc.
	EnvUsageSource = "TETHER_USAGE_SOURCE"
)

// ConfineProbeArg makes the runner binary check that it can confine the agent as its
// environment asks (EnvIsolation and the rest), by running itself confined, and exit 0 if so.
// Providers run it before they hand out an allocation.
const ConfineProbeArg = "__tether-confine-probe"

// Isolation modes (EnvIsolation).
const (
	// IsolationNamespaces runs every agent process in new user, mount, pid, ipc and uts
	// namespaces with a view of only its workspace and read-only system directories.
	IsolationNamespaces = "namespaces"
	// IsolationUID runs agent processes as an unprivileged uid apart from the runner's (the
	// sandbox itself, a container, is the boundary to the host).
	IsolationUID = "uid"
	// IsolationNone gives no isolation: agent processes run as the runner does.
	IsolationNone = "none"
)

// OpHello opens the runner's first stream after every (re)connect: the header, then a Hello; the
// controller answers with a trailer whose Result is a Welcome.
const OpHello = "hello"

// Hello is the runner's first message on its first stream after every (re)connect.
type Hello struct {
	ProtocolMin   int      `json:"protocol_min"`
	ProtocolMax   int      `json:"protocol_max"`
	RunnerVersion string   `json:"runner_version"`
	AllocationID  string   `json:"allocation_id"`
	Capabilities  []string `json:"capabilities"`
	PID           int      `json:"pid"`
	Root          string   `json:"root"`
	// Runs the runner has finished or still runs, so a controller that lost the socket mid-run can
	// settle its records.
	Runs []RunStatus `json:"runs,omitempty"`
	// Epoch is the highest writer epoch the runner has seen (0 on a fresh runner).
	Epoch uint64 `json:"epoch,omitempty"`
	// Services the runner supervises, re-reported after every reconnect.
	Services []ServiceStatus `json:"services,omitempty"`
}

// Welcome is the controller's answer to Hello.
type Welcome struct {
	Protocol    int    `json:"protocol"`
	WorkspaceID string `json:"workspace_id"`
	// SessionToken is a fresh token in every welcome: the runner replaces the one it connected
	// with (bootstrap or session) and presents the new one on its next connect. The token it
	// connected with stops working once it confirmed the new one with a WelcomeAck, or once it
	// presents the new one.
	SessionToken string `json:"session_token,omitempty"`
	// Epoch is the workspace's current writer epoch; the runner fences older ones from now on.
	Epoch uint64 `json:"epoch,omitempty"`
}

// WelcomeAck is the runner's last frame on the hello stream, after the Welcome: it now holds the
// welcome's session token, so the controller may retire the token the runner connected with. A
// runner that sends none (or whose ack is lost) keeps both working until it presents the new one.
type WelcomeAck struct {
	// SessionTokenSHA256 is the hex SHA-256 of the session token the runner took.
	SessionTokenSHA256 string `json:"session_token_sha256"`
}

// StatusAllocationBusy is the HTTP status of the connect refusal (code unauthorized) for an
// allocation whose runner is connected and answering, or whose other connection is being set up.
// Unlike 401 and 403, which mean the token is no good, a runner retries it with backoff: it may be
// the genuine runner reconnecting before its old connection was found dead.
const StatusAllocationBusy = 409

// Negotiate picks the highest protocol version both ranges contain.
func Negotiate(peerMin, peerMax int) (int, error) {
	v := min(peerMax, ProtocolMax)
	if v < max(peerMin, ProtocolMin) {
		return 0, Errorf(CodeUnsupported, "no common protocol version: peer speaks %d..%d, we speak %d..%d",
			peerMin, peerMax, ProtocolMin, ProtocolMax)
	}
	return v, nil
}

// Bearer formats a token for the Authorization header.
func Bearer(token string) string { return fmt.Sprintf("Bearer %s", token) }
