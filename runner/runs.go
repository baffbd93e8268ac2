package runner

import (
	"sync"
	"syscall"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
	"github.com/tetherhq/tether/sandbox/runlog"
)

// maxFinished bounds how many finished runs the runner remembers for a controller that lost the
// socket while they ran.
const maxFinished = 1000

type runEntry struct {
	status protocol.RunStatus
	proc   *process.Process
	// ended is closed when the run finished or its reservation was released.
	ended chan struct{}
	// log holds the run's output (nil until it started); ctl reaches its stdin, terminal and
	// process group; tty says its output is one terminal stream.
	log *runlog.Log
	ctl *runControl
	tty bool
	// attached counts the streams serving the run (exec, run_attach) that will send its exit;
	// reported says its exit reached the controller (on such a stream or as OpRunExited), so
	// that the runner reports an exit nobody attached saw, and only once.
	attached int
	reported bool
}

// output is what the run's log holds now.
func (e *runEntry) output() *protocol.RunOutput {
	if e.log == nil {
		return nil
	}
	o := &protocol.RunOutput{TTY: e.tty}
	o.StdoutStart, o.StdoutEnd = e.log.Bounds(protocol.StreamStdout)
	o.StderrStart, o.StderrEnd = e.log.Bounds(protocol.StreamStderr)
	return o
}

// statusNow is the entry's status with its output's current range.
func (e *runEntry) statusNow() protocol.RunStatus {
	st := e.status
	st.Output = e.output()
	return st
}

// runTable tracks the commands this runner started.
type runTable struct {
	mu       sync.Mutex
	runs     map[string]*runEntry
	finished []string // run ids in finishing order
	// quiesced refuses new runs while a close saves the workspace (see quiesce).
	quiesced bool
}

func newRunTable() *runTable { return &runTable{runs: map[string]*runEntry{}} }

// reserve claims id so one run can never execute twice, even if the controller resends it.
func (t *runTable) reserve(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.quiesced {
		return protocol.Errorf(protocol.CodeConflict, "the workspace is being closed: no new run starts")
	}
	if _, ok := t.runs[id]; ok {
		return protocol.Errorf(protocol.CodeConflict, "run %s was already started", id)
	}
	t.runs[id] = &runEntry{status: protocol.RunStatus{RunID: id}, ended: make(chan struct{})}
	return nil
}

// release forgets a reserved run that never started.
func (t *runTable) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.runs[id]; ok {
		close(e.ended)
	}
	delete(t.runs, id)
}

// started records the process of a reserved run, its log and control, and whether the stream
// that started it is attached. A run that was reserved before a quiesce closed the gate but
// starts after it is stopped at once: quiesce waits for it too.
func (t *runTable) started(id string, p *process.Process, log *runlog.Log, ctl *runControl, tty, attached bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.runs[id]; ok {
		e.status.Running, e.status.PID, e.proc = true, p.PID(), p
		e.log, e.ctl, e.tty = log, ctl, tty
		if attached {
			e.attached++
		}
		if t.quiesced {
			p.Cancel()
		}
	}
}

// exited records a run's end; report says nobody attached will send its exit, so the runner
// must report it. A finished run past maxFinished is forgotten, its log with it.
func (t *runTable) exited(id string, exit protocol.ExecExit) (st protocol.RunStatus, report bool) {
	t.mu.Lock()
	e, ok := t.runs[id]
	if !ok {
		t.mu.Unlock()
		return protocol.RunStatus{RunID: id, Finished: true, Exit: exit}, true
	}
	e.status.Running, e.status.Finished, e.status.Exit = false, true, exit
	e.proc = nil
	close(e.ended)
	st = e.statusNow()
	if e.attached == 0 {
		e.reported, report = true, true
	}
	t.finished = append(t.finished, id)
	var forget *runlog.Log
	if len(t.finished) > maxFinished {
		if old := t.runs[t.finished[0]]; old != nil {
			forget = old.log
		}
		delete(t.runs, t.finished[0])
		t.finished = t.finished[1:]
	}
	t.mu.Unlock()
	if forget != nil {
		forget.Remove()
	}
	return st, report
}

// attach counts one more stream serving run id, which must have started.
func (t *runTable) attach(id string) (*runEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	if !ok || e.log == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "run %q not found on this runner", id)
	}
	e.attached++
	return e, nil
}

// leave ends a stream attach counted. delivered says it sent the run's exit; report says it was
// the last one and nobody delivered the exit of the finished run, so the runner must report it.
func (t *runTable) leave(id string, delivered bool) (st protocol.RunStatus, report bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	if !ok {
		return protocol.RunStatus{}, false
	}
	e.attached--
	if delivered {
		e.reported = true
	}
	if e.attached == 0 && e.status.Finished && !e.reported {
		e.reported = true
		return e.statusNow(), true
	}
	return protocol.RunStatus{}, false
}

// lookup returns run id once it started.
func (t *runTable) lookup(id string) (*runEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	if !ok || e.log == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "run %q not found on this runner", id)
	}
	return e, nil
}

// signal delivers sig to the process group of run id while it runs.
func (t *runTable) signal(id string, sig syscall.Signal) (protocol.RunStatus, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	if !ok {
		return protocol.RunStatus{}, protocol.Errorf(protocol.CodeNotFound, "run %q not found on this runner", id)
	}
	if e.status.Finished {
		return e.statusNow(), protocol.Errorf(protocol.CodeConflict, "run %q already finished", id)
	}
	if e.proc == nil {
		return e.statusNow(), protocol.Errorf(protocol.CodeConflict, "run %q is still starting", id)
	}
	if err := e.proc.Signal(sig); err != nil {
		return e.statusNow(), protocol.Errorf(protocol.CodeFailed, "signal run %q: %v", id, err)
	}
	return e.statusNow(), nil
}

// running says whether run id was started here and has not finished.
func (t *runTable) running(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	return ok && !e.status.Finished
}

func (t *runTable) snapshot() []protocol.RunStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]protocol.RunStatus, 0, len(t.runs))
	for _, e := range t.runs {
		out = append(out, e.statusNow())
	}
	return out
}

func (t *runTable) killAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.runs {
		if e.proc != nil {
			e.proc.Cancel()
		}
	}
}

// quiescing is a run quiesce waits for.
type quiescing struct {
	id    string
	proc  *process.Process // nil while it is still starting
	ended <-chan struct{}
}

// quiesce refuses new runs from now on and returns every run not yet finished.
func (t *runTable) quiesce() []quiescing {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.quiesced = true
	var out []quiescing
	for id, e := range t.runs {
		if !e.status.Finished {
			out = append(out, quiescing{id: id, proc: e.proc, ended: e.ended})
		}
	}
	return out
}

// resume accepts new runs again.
func (t *runTable) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.quiesced = false
}

// status is what the table knows of run id now.
func (t *runTable) status(id string) protocol.RunStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.runs[id]; ok {
		return e.statusNow()
	}
	return protocol.RunStatus{RunID: id}
}
