// Package api holds the REST API's resource types, shared by the server and its Go client.
package api

import (
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Workspace states.
const (
	StateCreating = "creating"
	StateReady    = "ready"
	StateFailed   = "failed"
	StateDeleted  = "deleted"
)

// Workspace is a durable unit of work.
type Workspace struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Provider     string    `json:"provider"`
	State        string    `json:"state"`
	Reason       string    `json:"reason,omitempty"` // why it failed
	AllocationID string    `json:"allocation_id"`
	Root         string    `json:"root,omitempty"` // workspace root inside the sandbox
	Connected    bool      `json:"connected"`      // the runner is connected right now
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// CreateWorkspaceRequest is the body of POST /v1/workspaces.
type CreateWorkspaceRequest struct {
	Name     string `json:"name,omitempty"`
	Provider string `json:"provider,omitempty"`
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
	State        string     `json:"state"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Signal       int        `json:"signal,omitempty"`
	Error        string     `json:"error,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
}

// ErrorBody is every non-2xx response body.
type ErrorBody struct {
	Error protocol.Error `json:"error"`
}

// TreeImportResult answers PUT /v1/workspaces/{id}/tree.
type TreeImportResult = protocol.TreeImportResult
