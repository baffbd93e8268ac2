// Package local is the local sandbox provider: each allocation is a private
// directory under the provider's state dir, and the runner is a host process
// running as the controller's user. The runner confines every agent command
// in namespaces of its own (sandbox/confine) unless isolation=none was asked.
// It is the default provider.
package local
