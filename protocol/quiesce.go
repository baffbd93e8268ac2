package protocol

// OpQuiesce (Args: QuiesceArgs) stops everything that could still write to the workspace: every
// run the runner started (SIGTERM to its group, SIGKILL after the grace) and every service (by its
// stop policy, with the verified stop of OpServiceStop), and from then on refuses new runs and
// services, until an OpQuiesce with Release. It answers (Result: QuiesceResult) only once every
// process is gone; a run or service that would not stop fails it, naming them, and the gate stays
// closed for the caller to release. Close sends it before its final capture.
const OpQuiesce = "quiesce"

// QuiesceArgs are the arguments of OpQuiesce.
type QuiesceArgs struct {
	// Grace is how long a run gets between SIGTERM and SIGKILL, and a service its stop grace;
	// 0: the runner's default.
	Grace Duration `json:"grace,omitempty"`
	// Reason is recorded as the stop reason of every service it stops.
	Reason string `json:"reason,omitempty"`
	// Release opens the gate again (a close that refused after quiescing): new runs and services
	// are accepted. Nothing is stopped.
	Release bool `json:"release,omitempty"`
}

// QuiesceResult is what OpQuiesce stopped.
type QuiesceResult struct {
	Runs     []RunStatus     `json:"runs"`     // runs that were running, now finished
	Services []ServiceStatus `json:"services"` // services that were not over, all stopped or failed now
}
