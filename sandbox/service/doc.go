// Package service supervises a workspace's long-running processes (a dev server, a database):
// each in its own process group, with a port, an observed readiness, a restart policy, a bounded
// log with byte offsets, and a stop that is only reported once the group is gone and the port is
// closed.
package service
