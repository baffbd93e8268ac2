// Package providers hosts the controller's provider plugins (tether-provider-<name> binaries run
// with hashicorp/go-plugin): it finds them, starts and configures each on first use, and
// supervises them, restarting a plugin whose process died and reporting its last words.
package providers
