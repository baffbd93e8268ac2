package protocol

import (
	"fmt"
	"reflect"
	"slices"
)

// Operation names. Every operation is one yamux stream, opened by the side its Direction names
// (see Ops); a runner answers an op it does not know with CodeUnsupported.
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

// Direction says which side opens an operation's stream.
type Direction int

const (
	// ControllerToRunner operations are opened by the controller and served by the runner,
	// which advertises each one it serves as a capability in its hello.
	ControllerToRunner Direction = iota + 1
	// RunnerToController operations are opened by the runner on its own connection: OpHello
	// first, then the reports and requests the controller serves.
	RunnerToController
)

func (d Direction) String() string {
	switch d {
	case ControllerToRunner:
		return "controller→runner"
	case RunnerToController:
		return "runner→controller"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// OpSpec describes one operation of the wire protocol.
type OpSpec struct {
	Name      string
	Direction Direction
	// Mutating operations change the workspace, and so must carry the current writer epoch:
	// the runner refuses one that carries an older epoch than it has seen.
	Mutating bool
	// SetsEpoch marks the operation that moves the runner's writer epoch forward (OpSetEpoch):
	// fenced like a mutating one, though it changes nothing in the workspace.
	SetsEpoch bool
	// Args is the type the header's Args decode into; nil when the operation takes none.
	Args reflect.Type
}

// Fenced reports whether the runner checks the header's epoch before serving the operation.
func (s OpSpec) Fenced() bool { return s.Mutating || s.SetsEpoch }

// ops is the one list of operations: the runner's dispatch, its capabilities and the mutating
// set are derived from it, and tests check that the runner and the controller serve exactly the
// operations listed for their side. Order is the order capabilities are advertised in.
var ops = [...]OpSpec{
	{Name: OpExec, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[ExecArgs]()},
	{Name: OpTreeImport, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[TreeImportArgs]()},
	{Name: OpTreeExport, Direction: ControllerToRunner, Args: reflect.TypeFor[TreeExportArgs]()},
	{Name: OpFsList, Direction: ControllerToRunner, Args: reflect.TypeFor[FsListArgs]()},
	{Name: OpFsStat, Direction: ControllerToRunner, Args: reflect.TypeFor[FsPathArgs]()},
	{Name: OpFsRead, Direction: ControllerToRunner, Args: reflect.TypeFor[FsReadArgs]()},
	{Name: OpFsWrite, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsWriteArgs]()},
	{Name: OpFsMkdir, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsPathArgs]()},
	{Name: OpFsRemove, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsPathArgs]()},
	{Name: OpFsRename, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsRenameArgs]()},
	{Name: OpFsChmod, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsPathArgs]()},
	{Name: OpFsUploadChunk, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[FsUploadChunkArgs]()},
	{Name: OpFsUploadStatus, Direction: ControllerToRunner, Args: reflect.TypeFor[FsUploadSessionArgs]()},
	{Name: OpFsUploadAbort, Direction: ControllerToRunner, Args: reflect.TypeFor[FsUploadSessionArgs]()},
	{Name: OpSnapshotCapture, Direction: ControllerToRunner, Args: reflect.TypeFor[SnapshotCaptureArgs]()},
	{Name: OpSnapshotRestore, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[SnapshotRestoreArgs]()},
	{Name: OpSetEpoch, Direction: ControllerToRunner, SetsEpoch: true},
	{Name: OpTreeDigest, Direction: ControllerToRunner, Args: reflect.TypeFor[SnapshotCaptureArgs]()},
	{Name: OpServiceStart, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[ServiceSpec]()},
	{Name: OpServiceList, Direction: ControllerToRunner},
	{Name: OpServiceLogs, Direction: ControllerToRunner, Args: reflect.TypeFor[ServiceLogsArgs]()},
	{Name: OpServiceStop, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[ServiceStopArgs]()},
	{Name: OpGitCheckout, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[GitCheckoutArgs]()},
	{Name: OpGitInspect, Direction: ControllerToRunner, Args: reflect.TypeFor[GitInspectArgs]()},
	{Name: OpGitReconcile, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[GitReconcileArgs]()},
	{Name: OpGitBranch, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[GitBranchArgs]()},
	{Name: OpGitPack, Direction: ControllerToRunner, Args: reflect.TypeFor[GitPackArgs]()},
	{Name: OpQuiesce, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[QuiesceArgs]()},
	{Name: OpRunLogs, Direction: ControllerToRunner, Args: reflect.TypeFor[RunLogsArgs]()},
	{Name: OpRunAttach, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[RunAttachArgs]()},
	{Name: OpRunSignal, Direction: ControllerToRunner, Mutating: true, Args: reflect.TypeFor[RunSignalArgs]()},
	{Name: OpTCPDial, Direction: ControllerToRunner, Args: reflect.TypeFor[TCPDialArgs]()},
	{Name: OpFsWatch, Direction: ControllerToRunner, Args: reflect.TypeFor[FsWatchArgs]()},

	// The Hello travels after the header, not in its Args.
	{Name: OpHello, Direction: RunnerToController},
	{Name: OpRunExited, Direction: RunnerToController, Args: reflect.TypeFor[RunStatus]()},
	{Name: OpArtifactFetch, Direction: RunnerToController, Args: reflect.TypeFor[ArtifactFetchArgs]()},
	{Name: OpArtifactInstalled, Direction: RunnerToController, Args: reflect.TypeFor[ArtifactInstall]()},
	{Name: OpUsageReport, Direction: RunnerToController, Args: reflect.TypeFor[UsageReport]()},
}

// opIndex finds an operation's entry in ops by name.
var opIndex = func() map[string]int {
	m := make(map[string]int, len(ops))
	for i, s := range ops {
		m[s.Name] = i
	}
	return m
}()

// Ops lists every operation of the protocol (a copy: the list itself cannot be changed).
func Ops() []OpSpec { return slices.Clone(ops[:]) }

// LookupOp finds the operation named op.
func LookupOp(op string) (OpSpec, bool) {
	i, ok := opIndex[op]
	if !ok {
		return OpSpec{}, false
	}
	return ops[i], true
}

// Mutating reports whether op changes the workspace, and so must carry the current writer epoch.
func Mutating(op string) bool {
	s, ok := LookupOp(op)
	return ok && s.Mutating
}

// RunnerCapabilities are the capabilities this build of the runner advertises: every
// controller→runner operation, in the order of the list, then its features.
func RunnerCapabilities() []string {
	var caps []string
	for _, s := range ops {
		if s.Direction == ControllerToRunner {
			caps = append(caps, s.Name)
		}
	}
	return append(caps, CapWriteSHA256Trailer)
}

// CapWriteSHA256Trailer is advertised by a runner that checks FsWriteArgs.SHA256Trailer; one
// that does not would publish such a write unchecked, so the controller asks no other for it.
const CapWriteSHA256Trailer = "fs_write.sha256_trailer"

// ExecArgs are the arguments of OpExec.
type ExecArgs struct {
	RunID   string   `json:"run_id"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"` // K=V, added to the runner's environment
	Cwd     string   `json:"cwd,omitempty"` // workspace-relative
	Timeout Duration `json:"timeout,omitempty"`
	Stdin   bool     `json:"stdin,omitempty"` // false: the command's stdin is /dev/null
	// TTY, when set, runs the command on a pseudo-terminal of this size: its stdin, stdout and
	// stderr are the terminal, and its output travels as ChanStdout alone.
	TTY *WinSize `json:"tty,omitempty"`
	// Detach ends the stream right after ChanStarted: the command runs on, its output kept in
	// the run's log, its exit reported with OpRunExited.
	Detach bool `json:"detach,omitempty"`
	// IdempotencyKey is read by the controller only (client → controller): a repeat with the same
	// key and argv is the same run, never a second process.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// WinSize is a terminal's size in character cells.
type WinSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecStarted is sent on ChanStarted once the process runs (and first on an attach stream).
type ExecStarted struct {
	PID   int    `json:"pid"`
	RunID string `json:"run_id,omitempty"`
	TTY   bool   `json:"tty,omitempty"`
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
	Signal int      `json:"signal,omitempty"` // deliver this signal to the process group
	Cancel bool     `json:"cancel,omitempty"` // kill the process group: the client went away
	Resize *WinSize `json:"resize,omitempty"` // a TTY run's terminal changed size
}

// RunStatus is what the runner knows of a run it started.
type RunStatus struct {
	RunID    string   `json:"run_id"`
	Running  bool     `json:"running"`
	PID      int      `json:"pid,omitempty"`
	Exit     ExecExit `json:"exit"`
	Finished bool     `json:"finished"`
	// Output is what the run's log holds (nil when the runner keeps no log of the run).
	Output *RunOutput `json:"output,omitempty"`
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
