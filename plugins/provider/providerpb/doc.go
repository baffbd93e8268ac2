// Package providerpb is the wire code of the provider plugin protocol: the controller and a
// tether-provider-* process talk gRPC to each other (through hashicorp/go-plugin), and both sides
// need the same messages and stubs. It is generated from plugins/provider/proto/provider.proto
// and committed, so builds need no protoc; `make generate` regenerates it. Only package provider
// imports it: providers and the controller use provider's types instead.
package providerpb
