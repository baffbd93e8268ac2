// Package integration holds end-to-end tests: the real tether, tether-runner and provider
// binaries, real processes, a real TCP path between them.
package integration
