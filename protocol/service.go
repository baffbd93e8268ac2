package protocol

import "time"

// Service operations, opened by the controller. A service is a long-running process the runner
// supervises in its own process group.
const (
	// OpServiceStart starts (Args: ServiceSpec) and answers once the service is observed ready or
	// has failed: Result is ServiceStatus (state ready), or an error carrying the reason (the
	// status with the stderr tail travels in the error message and in a later list).
	OpServiceStart = "service_start"
	// OpServiceList answers with []ServiceStatus.
	OpServiceList = "service_list"
	// OpServiceLogs (Args: ServiceLogsArgs) answers with a reply trailer (Result: ServiceLogsReply)
	// and then channel frames: ChanStdout frames carry log bytes in order from the reply's
	// offset; with Follow the stream stays open for new bytes until the service stops or the
	// stream is closed; a final ChanExit frame (JSON ServiceLogsEnd) ends it.
	OpServiceLogs = "service_logs"
	// OpServiceStop (Args: ServiceStopArgs) answers once the process group is gone and the port
	// no longer accepts connections: Result is ServiceStatus (state stopped).
	OpServiceStop = "service_stop"
)

// Service states.
const (
	ServiceStarting = "starting"
	ServiceReady    = "ready"
	ServiceStopping = "stopping"
	ServiceStopped  = "stopped"
	ServiceFailed   = "failed"
)

// ServiceSpec describes a service.
type ServiceSpec struct {
	Name    string   `json:"name"`
	Argv    []string `json:"argv"`
	Cwd     string   `json:"cwd,omitempty"`      // workspace-relative, guarded
	Env     []string `json:"env,omitempty"`      // K=V
	Port    int      `json:"port,omitempty"`     // the controller sends the port it allotted; 0: the runner picks
	PortEnv string   `json:"port_env,omitempty"` // variable the port is passed in, default PORT
	// Ready is "http:PATH" (a 2xx/3xx answer on 127.0.0.1:PORT), "tcp" (a connection accepted
	// on the port; also what "" means) or "none" (started is ready: only when asked for).
	Ready         string   `json:"ready,omitempty"`
	ReadyTimeout  Duration `json:"ready_timeout,omitempty"`  // default 30s
	ReadyInterval Duration `json:"ready_interval,omitempty"` // default 100ms
	Restart       string   `json:"restart,omitempty"`        // "never" (default) | "on-failure"
	MaxRestarts   int      `json:"max_restarts,omitempty"`   // with on-failure, default 3
	// StopPolicy is "manual" (default), "on-run-finish" (stopped when Run ends) or "idle:DUR"
	// (stopped after DUR with no connection open on its port and no new log bytes).
	StopPolicy string `json:"stop_policy,omitempty"`
	Run        string `json:"run,omitempty"`       // with on-run-finish: the run whose end stops it
	LogBytes   int    `json:"log_bytes,omitempty"` // ring size, default 1 MiB
}

// ServiceStatus is what the runner knows of a service.
type ServiceStatus struct {
	Name       string      `json:"name"`
	State      string      `json:"state"`
	Reason     string      `json:"reason,omitempty"`
	PID        int         `json:"pid,omitempty"`
	Port       int         `json:"port,omitempty"`
	Restarts   int         `json:"restarts"`
	StderrTail string      `json:"stderr_tail,omitempty"` // last 4 KiB of stderr, for failures
	LogEnd     int64       `json:"log_end"`               // offset one past the last log byte
	StartedAt  time.Time   `json:"started_at"`
	ReadyAt    time.Time   `json:"ready_at,omitempty"`
	StoppedAt  time.Time   `json:"stopped_at,omitempty"`
	Spec       ServiceSpec `json:"spec"`
}

// ServiceLogsArgs asks for a service's log from Offset (bytes since the service first started;
// an offset older than the ring's start resumes at the ring's start, said in the reply).
type ServiceLogsArgs struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
	Follow bool   `json:"follow,omitempty"`
}

// ServiceLogsReply says where the bytes that follow start.
type ServiceLogsReply struct {
	Offset int64 `json:"offset"`
}

// ServiceLogsEnd closes a log stream: Offset is one past the last byte sent, so a reader that
// reconnects resumes there without a gap or a duplicate.
type ServiceLogsEnd struct {
	Offset int64 `json:"offset"`
	// Overrun: the stream ended because the bytes from Offset on were overwritten in the ring
	// before they were sent. A reader asks again from Offset and the reply says where the log
	// really resumes.
	Overrun bool `json:"overrun,omitempty"`
}

// ServiceStopArgs stops a service: SIGTERM to its group, SIGKILL after Grace (default 5s).
type ServiceStopArgs struct {
	Name  string   `json:"name"`
	Grace Duration `json:"grace,omitempty"`
}
