// Package provider is the SDK for tether sandbox providers: the Provider
// interface a provider implements, and the hashicorp/go-plugin gRPC glue that
// lets the controller load a provider as a separate plugin process.
//
// A provider main is one line: provider.Serve(myProvider). The controller
// loads it with Open and uses the returned *Client as a Provider.
package provider

import "context"

// Config is what the controller hands a provider once, after loading it.
type Config struct {
	// StateDir is a private directory reserved for this provider
	// (for example DATA/providers/local). The provider owns its contents.
	StateDir string
	// Options are provider specific settings from the operator's config.
	Options map[string]string
}

// CreateRequest asks a provider to start a sandbox running the runner.
type CreateRequest struct {
	WorkspaceID  string
	AllocationID string
	// ControllerURL is the base URL the runner dials, e.g. http://127.0.0.1:7420.
	ControllerURL string
	// RunnerToken is a one-use bootstrap token. Providers pass it to the
	// runner only as the environment variable TETHER_RUNNER_TOKEN and never
	// log it or store it anywhere else.
	RunnerToken string
	// RunnerBinary is the absolute path, on the controller host, of the
	// static tether-runner binary.
	RunnerBinary string
	// Env is extra environment for the runner.
	Env map[string]string
}

// Allocation describes a started sandbox.
type Allocation struct {
	ID string
	// Root is the workspace root path as seen inside the sandbox.
	Root string
	// Info is provider specific, human oriented detail (pid, container id...).
	Info map[string]string
}

// Info identifies a provider.
type Info struct {
	Name         string
	Version      string
	Capabilities []string
}

// Provider creates and tears down sandboxes. Methods return *Error for
// failures the controller should tell apart; any other error crosses the
// plugin boundary as CodeProviderFailed.
type Provider interface {
	Info(ctx context.Context) (Info, error)
	Configure(ctx context.Context, cfg Config) error
	// Create starts the runner and returns once its process has started;
	// the controller observes readiness itself when the runner dials in.
	Create(ctx context.Context, req CreateRequest) (Allocation, error)
	// Stop kills the runner and everything it started. Idempotent.
	Stop(ctx context.Context, allocationID string) error
	// Destroy stops the allocation and removes all its sandbox state.
	// Idempotent: an unknown allocation is not an error.
	Destroy(ctx context.Context, allocationID string) error
}

// Environment variables a provider sets for the runner it starts.
const (
	EnvControllerURL = "TETHER_CONTROLLER_URL"
	EnvRunnerToken   = "TETHER_RUNNER_TOKEN"
	EnvAllocationID  = "TETHER_ALLOCATION_ID"
	EnvWorkspaceID   = "TETHER_WORKSPACE_ID"
	EnvWorkspaceRoot = "TETHER_WORKSPACE_ROOT"
)
