// Package metrics is the controller's Prometheus instrumentation: one registry per controller
// (never the process-wide default one, so two controllers in one process, as tests run them,
// count apart), the metrics defined once in a table (Defs) that the README's list is checked
// against, and the latest resource usage each connected runner reported for its workspace.
//
// Every label has a bounded set of values: API routes are their patterns, never raw paths;
// error codes are the protocol's; bytes are by kind. The per-workspace usage gauges are the
// one exception, bounded by the workspaces whose runners are connected here: their series go
// when the runner disconnects (the workspace closes, is reopened elsewhere, or its controller
// changes).
package metrics
