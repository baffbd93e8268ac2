// Package fake is a FAKE of the Daytona REST API, for tests: an httptest
// server implementing the subset of Daytona's documented endpoints the
// tether Daytona provider uses, with the documented request and response
// shapes and sandbox states (started, stopped, archived, ...). It is not
// Daytona and shares no code with it; it was written from the published
// API documentation.
//
// Each sandbox is backed by a real local directory, and the toolbox's
// session "exec" really runs the command (sh -c) as a local process in
// that directory, so a runner uploaded through the file API really runs.
// Stopping a sandbox sends SIGTERM to its processes (SIGKILL after a
// grace period); deleting it kills them and removes the directory.
//
// Knobs inject the faults the provider must survive: failing creates,
// losing a create's answer, a sandbox that reads back archived or resumed,
// ignored auto-delete updates, uploads and downloads that fail midway,
// listings that misreport a size or name a hostile path.
package fake
