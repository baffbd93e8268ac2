// Package fake is a FAKE of the Daytona REST API, for tests: two httptest
// servers, the API and the toolbox proxy (served at the toolboxProxyUrl
// its sandbox records carry, {toolboxProxyUrl}/{sandboxId}/...),
// implementing the subset of Daytona's published API (v0.205.1,
// daytona/clients d94a128; plugins/daytona/testdata) the tether Daytona
// provider uses. It is not Daytona and shares no code with it. The
// provider's tests validate every request and answer it exchanges against
// the published documents (fake.Observe), so it cannot drift from them.
//
// It behaves as the real service does where that matters to a client:
// sandboxes pass through creating (or pending_build), starting, stopping,
// archiving and restoring for a number of requests (Steps), and DELETE,
// stop, start and archive answer 409 "state change in progress" meanwhile;
// the list is paginated ({items, nextCursor}) and may miss a new sandbox
// (ListLag); any request may be answered 429 with a Retry-After-<limit>
// header (RateLimit); resources are refused with a snapshot (400 "Cannot
// specify Sandbox resources when using a snapshot"); a create may make its
// sandbox and still fail (FailCreatesAfterMaking); stop SIGKILLs every
// process, while deleting a process session sends SIGTERM, then SIGKILL;
// upload-v2 writes its destination in place. Errors have Daytona's shapes:
// {statusCode, message, error} from the API, ErrorResponse from the toolbox.
//
// Each sandbox is backed by a real local directory (its user's home), and
// commands (session exec, process/execute) really run as local processes
// there, so a runner uploaded through the file API really runs; every
// command's text is recorded (Commands), as Daytona logs it.
//
// Other knobs inject faults the provider must survive: a sandbox that
// reads back archived or resumed, ignored auto-delete updates, uploads and
// downloads that fail midway, listings that misreport a size or name a
// hostile path.
package fake
