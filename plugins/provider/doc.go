// Package provider is the SDK for tether sandbox providers: the Provider
// interface a provider implements, and the hashicorp/go-plugin gRPC glue that
// lets the controller load a provider as a separate plugin process.
//
// A provider main is one line: provider.Serve(myProvider). The controller
// loads it with Open and uses the returned *Client as a Provider. Every
// provider must pass the contract suite in plugins/providertest.
package provider
