package controller

import (
	"encoding/json"
	"fmt"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/protocol"
)

// usageReport keeps a runner's sample of its sandbox's usage (protocol.OpUsageReport) as its
// workspace's latest. What a runner sends is bounded (metrics.CheckUsage): a report that does
// not decode or is out of bounds is refused and is a strike against the runner; one that comes
// too soon after the last is refused without one (a reconnect can bring two close together).
func (s *Server) usageReport(c *hub.Conn, h protocol.Header) protocol.Trailer {
	var u protocol.UsageReport
	if err := json.Unmarshal(h.Args, &u); err != nil {
		s.metrics.UsageRefused()
		s.strike(c, fmt.Sprintf("usage report: %v", err))
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeInvalidArgument, "usage report: %v", err)}
	}
	if err := metrics.CheckUsage(u); err != nil {
		s.metrics.UsageRefused()
		s.strike(c, err.Error())
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	// Operations outlive their connection: a report read as the runner went away is not kept
	// (its series would outlive the disconnect that dropped them).
	if live, ok := s.hub.Get(c.AllocationID); !ok || live != c {
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnavailable, "usage report: the runner's connection has ended")}
	}
	if err := s.metrics.SetUsage(c.AllocationID, c.WorkspaceID, u, s.now()); err != nil {
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	return protocol.Trailer{OK: true}
}

// withUsage adds the latest usage its runner reported here to a workspace of the API. Another
// controller's runners report to it: their workspaces show none here.
func (s *Server) withUsage(ws api.Workspace) api.Workspace {
	if u, ok := s.metrics.Usage(ws.AllocationID); ok && ws.Connected {
		ws.Usage = &api.WorkspaceUsage{CPUPercent: u.CPUPercent, MemoryBytes: u.MemoryBytes, DiskBytes: u.DiskBytes, SampledAt: u.SampledAt}
	}
	return ws
}
