package runner

import (
	"sync"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// maxFinished bounds how many finished runs the runner remembers for a controller that lost the
// socket while they ran.
const maxFinished = 1000

type runEntry struct {
	status protocol.RunStatus
	proc   *process.Process
	// ended is closed when the run finished or its reservation was released.
	ended chan struct{}
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

// started records the process of a reserved run. A run that was reserved before a quiesce
// closed the gate but starts after it is stopped at once: quiesce waits for it too.
func (t *runTable) started(id string, p *process.Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.runs[id]; ok {
		e.status.Running, e.status.PID, e.proc = true, p.PID(), p
		if t.quiesced {
			p.Cancel()
		}
	}
}

func (t *runTable) exited(id string, exit protocol.ExecExit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.runs[id]
	if !ok {
		return
	}
	e.status.Running, e.status.Finished, e.status.Exit = false, true, exit
	e.proc = nil
	close(e.ended)
	t.finished = append(t.finished, id)
	if len(t.finished) > maxFinished {
		delete(t.runs, t.finished[0])
		t.finished = t.finished[1:]
	}
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
		out = append(out, e.status)
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
		return e.status
	}
	return protocol.RunStatus{RunID: id}
}
