// PENDING MERGE: replaced by h/stopstart; delete this file.
package controller

import (
	"context"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// The states workspace stop/start adds (api.StateStopping, api.StateStopped, api.StateStarting
// once merged).
const (
	stateStopping = api.WorkspaceState("stopping")
	stateStopped  = api.WorkspaceState("stopped")
	stateStarting = api.WorkspaceState("starting")
)

// StopWorkspace stops a ready workspace's sandbox, retaining it.
func (s *Server) StopWorkspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	return api.Workspace{}, protocol.Errorf(protocol.CodeUnsupported, "workspace stop: pending merge")
}

// StartWorkspace resumes a stopped workspace's sandbox.
func (s *Server) StartWorkspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	return api.Workspace{}, protocol.Errorf(protocol.CodeUnsupported, "workspace start: pending merge")
}
