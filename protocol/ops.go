package protocol

// Operation names. Every operation is one yamux stream opened by the controller; a runner answers
// an op it does not know with CodeUnsupported.
const (
	OpExec       = "exec"
	OpTreeImport = "tree_import"

	// OpRunExited goes the other way, runner to controller: a run whose exec stream was lost has
	// finished. Its header's Args is a RunStatus.
	OpRunExited = "run_exited"

	// OpSetEpoch tells the runner the workspace's current writer epoch (header Epoch). From then
	// on it refuses mutating operations that carry an older one, however late they arrive.
	OpSetEpoch = "set_epoch"
)

// Mutating reports whether op changes the workspace, and so must carry the current writer epoch.
func Mutating(op string) bool {
	switch op {
	case OpExec, OpTreeImport, OpFsWrite, OpFsMkdir, OpFsRemove, OpFsRename, OpFsChmod, OpSnapshotRestore,
		OpServiceStart, OpServiceStop, OpGitCheckout, OpGitReconcile, OpQuiesce:
		return true
	}
	return false
}

// Capabilities this build of the runner advertises.
var RunnerCapabilities = []string{OpExec, OpTreeImport, OpFsList, OpFsStat, OpFsRead, OpFsWrite,
	OpFsMkdir, OpFsRemove, OpFsRename, OpFsChmod, OpSnapshotCapture, OpSnapshotRestore, OpSetEpoch, OpTreeDigest, OpServiceStart, OpServiceList,
	OpServiceLogs, OpServiceStop, OpGitCheckout, OpGitInspect, OpGitReconcile, OpQuiesce}

// ExecArgs are the arguments of OpExec.
type ExecArgs struct {
	RunID   string   `json:"run_id"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"` // K=V, added to the runner's environment
	Cwd     string   `json:"cwd,omitempty"` // workspace-relative
	Timeout Duration `json:"timeout,omitempty"`
	Stdin   bool     `json:"stdin,omitempty"` // false: the command's stdin is /dev/null
}

// ExecStarted is sent on ChanStarted once the process runs.
type ExecStarted struct {
	PID int `json:"pid"`
}

// ExecExit is the final frame of an exec stream (ChanExit).
type ExecExit struct {
	ExitCode int    `json:"exit_code"`        // -1 when killed by a signal or never started
	Signal   int    `json:"signal,omitempty"` // signal number when killed by one
	TimedOut bool   `json:"timed_out,omitempty"`
	Canceled bool   `json:"canceled,omitempty"`
	Error    *Error `json:"error,omitempty"` // the command could not start, or the runner failed
}

// Status is the CLI-visible exit status: the command's own, 128+N for signal N.
func (e ExecExit) Status() int {
	if e.Signal > 0 {
		return 128 + e.Signal
	}
	return e.ExitCode
}

// ExecControl travels on ChanControl from the controller to the runner.
type ExecControl struct {
	Signal int  `json:"signal,omitempty"` // deliver this signal to the process group
	Cancel bool `json:"cancel,omitempty"` // kill the process group: the client went away
}

// RunStatus is what the runner knows of a run it started.
type RunStatus struct {
	RunID    string   `json:"run_id"`
	Running  bool     `json:"running"`
	PID      int      `json:"pid,omitempty"`
	Exit     ExecExit `json:"exit"`
	Finished bool     `json:"finished"`
}

// TreeImportArgs are the arguments of OpTreeImport; the body is a tar stream (optionally zstd).
type TreeImportArgs struct {
	Dir string `json:"dir,omitempty"` // workspace-relative target, default the root
}

// TreeImportResult is the trailer result of OpTreeImport.
type TreeImportResult struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}
