package provider

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/tetherhq/tether/plugins/provider/providerpb"
)

// ProtocolVersion is the provider plugin protocol version. Bump it, and add
// a new entry to the versioned plugin set, when the gRPC service changes
// incompatibly.
const ProtocolVersion = 1

// pluginName is the key of the provider in the go-plugin plugin set.
const pluginName = "provider"

// Handshake is shared by host and plugin. The cookie is not a security
// feature; it stops a user from running a plugin binary by hand by mistake.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "TETHER_PLUGIN",
	MagicCookieValue: "f3b1c2d4-provider-7a9e-tether",
}

// envParentPID tells the plugin which pid started it, so its watchdog can
// notice the host's death even if it happened before the plugin got going.
const envParentPID = "TETHER_PLUGIN_PARENT_PID"

// envLogLevel lets the host pass its log level down to the plugin.
const envLogLevel = "TETHER_PLUGIN_LOG_LEVEL"

// pluginSets returns the versioned plugin sets; impl is nil on the host side.
func pluginSets(impl Provider) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {pluginName: &grpcPlugin{impl: impl}},
	}
}

// grpcPlugin adapts Provider to go-plugin's gRPC plugin interface.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Provider
}

// GRPCServer registers both services of protocol version 1, Base and
// Provider, on the plugin's one gRPC server.
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	providerpb.RegisterBaseServer(s, &baseServer{impl: p.impl})
	providerpb.RegisterProviderServer(s, &grpcServer{impl: p.impl})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{base: providerpb.NewBaseClient(c), rpc: providerpb.NewProviderClient(c)}, nil
}
