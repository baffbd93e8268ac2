package controller

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// A service's port is the controller's to give: it allots one for --port auto, records it before
// the runner starts the service, and from then on a runner's report of another port is a lie
// (the runner may be compromised) that is refused, never published as an endpoint.

// allotPort picks a free loopback port for a service started with --port auto. The kernel's
// choice on the controller's host is free on the local provider's shared network and, being a
// high ephemeral port, all but certainly free in a sandbox with a network of its own.
func allotPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, protocol.Errorf(protocol.CodeFailed, "allot a port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// advertisedPort is the port of the controller's advertised URL, 0 when it names none.
func advertisedPort(advertise string) int {
	u, err := url.Parse(advertise)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// allotAvoiding allots a port other than own. The kernel picks a port free where the
// controller runs, which need not be where its advertised address listens (a load balancer,
// or another network namespace): a service given that port would have an endpoint ownAddress
// refuses, so the start would fail for nothing (1 round in 200 of the cluster loop did).
func allotAvoiding(own int, allot func() (int, error)) (int, error) {
	for range 8 {
		p, err := allot()
		if err != nil || p != own {
			return p, err
		}
	}
	return 0, protocol.Errorf(protocol.CodeFailed, "allot a port: the kernel chose the controller's own port %d eight times", own)
}

// portRefused is the error for a runner reporting a service on a port it was not given.
func portRefused(name string, reported, allotted int) error {
	if allotted == 0 {
		return protocol.Errorf(protocol.CodeConflict, "the runner reports service %s on port %d, but the controller allotted it no port; nothing is published", name, reported)
	}
	return protocol.Errorf(protocol.CodeConflict, "the runner reports service %s on port %d, not the port %d it was given; nothing is published", name, reported, allotted)
}

// holdToAllotted reconciles what a runner reports of a service with the controller's record of
// it: the record keeps the allotted port, and a report of another port marks the service
// failed with the refusal, which is also returned.
func holdToAllotted(v *api.Service, prev api.Service, known bool) error {
	allotted := 0
	if known {
		allotted = prev.Port
	}
	if v.Port == allotted {
		return nil
	}
	err := portRefused(v.Name, v.Port, allotted)
	v.Port = allotted
	if v.State != protocol.ServiceStopped && v.State != protocol.ServiceFailed {
		v.State = protocol.ServiceFailed
	}
	v.Reason = protocol.AsError(err).Message
	return err
}

// ownAddress refuses an endpoint that is the controller itself: a service never answers on the
// controller's own port, whatever a runner or provider says.
func (s *Server) ownAddress(endpoint string) error {
	ep, err := url.Parse(endpoint)
	if err != nil {
		return protocol.Errorf(protocol.CodeProviderFailed, "endpoint %q: %v", endpoint, err)
	}
	own, err := url.Parse(s.advertise)
	if err != nil || own.Port() == "" {
		return nil
	}
	if ep.Port() != own.Port() {
		return nil
	}
	if ep.Hostname() == own.Hostname() || ep.Hostname() == "localhost" || isLoopback(ep.Hostname()) {
		return protocol.Errorf(protocol.CodeConflict, "endpoint %s is the controller's own address; nothing is published", endpoint)
	}
	return nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// startPort settles the port a service is started on and records it before the runner is
// asked, so that every later report is held to it.
func (s *Server) startPort(ctx context.Context, workspaceID string, spec *protocol.ServiceSpec) error {
	// A live service of that name keeps its record (and its port): the runner will refuse the
	// start as exists, and its reports must still be held to the port it was given.
	live, err := s.services(ctx, workspaceID)
	if err != nil {
		return err
	}
	for _, v := range live {
		if v.Name == spec.Name && serviceLive(v.State) {
			return protocol.Errorf(protocol.CodeExists, "service %q is already %s", spec.Name, v.State)
		}
	}
	if spec.Port == 0 {
		p, err := allotAvoiding(advertisedPort(s.advertise), allotPort)
		if err != nil {
			return err
		}
		spec.Port = p
	}
	// Links made for an earlier service of that name are not this one's: whatever it runs now,
	// nobody made a link to it.
	s.revokeOnStop(ctx, workspaceID, spec.Name)
	v := api.Service{WorkspaceID: workspaceID, Name: spec.Name, State: protocol.ServiceStarting, Port: spec.Port, Argv: spec.Argv}
	if err := s.store.PutService(ctx, v); err != nil {
		return fmt.Errorf("record service %s on port %s: %w", spec.Name, strconv.Itoa(spec.Port), err)
	}
	return nil
}
