package protocol

import "encoding/json"

// Durable runs: the runner keeps every run's output in a bounded log with absolute byte offsets
// per stream, so any reader (a reattaching client, `run logs`, a controller that restarted) can
// continue exactly where it stopped, and is told exactly which bytes were dropped, never a
// silent gap.
//
// On every stream that carries a run's output (exec, run_attach, run_logs), each stream's data
// frames (ChanStdout, ChanStderr) are contiguous: the first starts at the offset asked for (or at
// the To of a ChanGap frame sent before it), each next one where the last ended. A reader that
// counts the bytes it received per stream therefore always knows the offset to resume from.

const (
	// OpRunLogs reads a run's log from the given offsets: data frames, ChanGap frames for bytes
	// no longer held, and ChanLogEnd last. With Follow it goes on until the run ended and all
	// its output was sent. A refused read (unknown run, unknown stream, an offset past what
	// the stream ever held) is one ChanError frame carrying the Error, and nothing else.
	OpRunLogs = "run_logs"
	// OpRunAttach reconnects to a run: ChanStarted first, then its output from the given offsets
	// as run_logs with Follow, stdin and control frames forwarded to it, and ChanExit last (or
	// ChanExit at once, after the rest of its log, when it already ended). A finished run can be
	// attached to; a run the runner does not know is CodeNotFound (ChanExit with the error).
	OpRunAttach = "run_attach"
	// OpRunSignal delivers a signal to a running run's process group; the trailer's result is
	// its RunStatus.
	OpRunSignal = "run_signal"
)

// Output stream names.
const (
	StreamStdout = "stdout" // also a TTY run's single stream
	StreamStderr = "stderr"
)

// RunOutput is what a run's log holds, per stream: bytes [Start, End) of each are still held;
// End is the total written so far.
type RunOutput struct {
	StdoutStart int64 `json:"stdout_start"`
	StdoutEnd   int64 `json:"stdout_end"`
	StderrStart int64 `json:"stderr_start"`
	StderrEnd   int64 `json:"stderr_end"`
	TTY         bool  `json:"tty,omitempty"`
}

// RunLogsArgs are the arguments of OpRunLogs.
type RunLogsArgs struct {
	RunID        string `json:"run_id"`
	StdoutOffset int64  `json:"stdout_offset,omitempty"`
	StderrOffset int64  `json:"stderr_offset,omitempty"`
	// Stream limits the output to one stream ("stdout" or "stderr"); "" sends both.
	Stream string `json:"stream,omitempty"`
	// Follow keeps the stream open for new output until the run ends.
	Follow bool `json:"follow,omitempty"`
	// NoOutput sends no data frames: with Follow, the stream only waits for the run's end.
	NoOutput bool `json:"no_output,omitempty"`
}

// RunAttachArgs are the arguments of OpRunAttach.
type RunAttachArgs struct {
	RunID        string `json:"run_id"`
	StdoutOffset int64  `json:"stdout_offset,omitempty"`
	StderrOffset int64  `json:"stderr_offset,omitempty"`
	// Stdin forwards ChanStdin frames to the run's stdin (or its terminal).
	Stdin bool `json:"stdin,omitempty"`
}

// RunSignalArgs are the arguments of OpRunSignal.
type RunSignalArgs struct {
	RunID  string `json:"run_id"`
	Signal int    `json:"signal"`
}

// LogGap is the payload of ChanGap: bytes [From, To) of Stream are no longer held.
type LogGap struct {
	Stream string `json:"stream"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
}

// LogEnd is the payload of ChanLogEnd.
type LogEnd struct {
	StdoutOffset int64     `json:"stdout_offset"` // where the stdout data sent ended
	StderrOffset int64     `json:"stderr_offset"`
	Finished     bool      `json:"finished"`
	Exit         *ExecExit `json:"exit,omitempty"` // when Finished
	// Output is what the run's log holds as the read ends (nil from a runner that does not
	// say): how `run show` learns a run's size and the range still held.
	Output *RunOutput `json:"output,omitempty"`
}

// LogCursor follows a run-output stream's offsets and checks every frame that moves them
// against the rule above: data contiguous, a gap that starts where its stream stands and ends
// past it, a log end at the offsets reached. The runner is untrusted: a gap that went backwards
// or an end that disagrees with the bytes sent would make a reader resume at the wrong byte
// (output doubled or silently lost), so such a frame is CodeCorrupt and ends the read.
type LogCursor struct {
	Offsets [2]int64 // stdout, stderr
}

// streamIndex is a stream name's index in Offsets.
func streamIndex(name string) (int, bool) {
	switch name {
	case StreamStdout:
		return 0, true
	case StreamStderr:
		return 1, true
	}
	return 0, false
}

// Data counts n bytes of a data frame (ChanStdout or ChanStderr).
func (c *LogCursor) Data(ch Channel, n int) {
	if ch == ChanStderr {
		c.Offsets[1] += int64(n)
	} else {
		c.Offsets[0] += int64(n)
	}
}

// Gap decodes and checks a ChanGap payload and moves its stream to the gap's end.
func (c *LogCursor) Gap(p []byte) (LogGap, error) {
	var g LogGap
	if err := json.Unmarshal(p, &g); err != nil {
		return g, Errorf(CodeCorrupt, "bad gap frame: %v", err)
	}
	i, ok := streamIndex(g.Stream)
	if !ok || g.From != c.Offsets[i] || g.To <= g.From {
		return g, Errorf(CodeCorrupt, "gap frame %s [%d, %d) does not continue the output at %d", g.Stream, g.From, g.To, c.Offsets[min(i, 1)])
	}
	c.Offsets[i] = g.To
	return g, nil
}

// End decodes and checks a ChanLogEnd payload: its offsets are where the data sent ended.
func (c *LogCursor) End(p []byte) (LogEnd, error) {
	var e LogEnd
	if err := json.Unmarshal(p, &e); err != nil {
		return e, Errorf(CodeCorrupt, "bad log end frame: %v", err)
	}
	if e.StdoutOffset != c.Offsets[0] || e.StderrOffset != c.Offsets[1] {
		return e, Errorf(CodeCorrupt, "log end at %d/%d, but the output sent ends at %d/%d",
			e.StdoutOffset, e.StderrOffset, c.Offsets[0], c.Offsets[1])
	}
	if e.Finished != (e.Exit != nil) {
		return e, Errorf(CodeCorrupt, "log end says finished=%t with exit %v", e.Finished, e.Exit)
	}
	return e, nil
}
