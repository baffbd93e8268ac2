package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// Service is one supervised service. Its supervisor goroutine alone owns the process; everyone
// else reads the status and the log, or asks for a stop.
type Service struct {
	spec       protocol.ServiceSpec
	port       int
	env        []string
	resolveDir DirResolver
	confiner   process.Confiner
	clock      clockwork.Clock
	log        *Ring
	tail       *tailBuffer

	mu          sync.Mutex
	status      protocol.ServiceStatus
	stopOnce    sync.Once
	stopReq     chan struct{} // closed when a stop is asked for
	grace       time.Duration
	stopReason  string        // why the stop was asked for: on request, idle, the run finished
	readyOrDone chan struct{} // closed when first ready, or when the service ended
	readyOnce   sync.Once
	done        chan struct{} // closed when the state is final (stopped or failed)
	stopErr     error         // set when a requested stop could not verify the group or port gone
}

func newService(spec protocol.ServiceSpec, port int, baseEnv []string, resolveDir DirResolver, clock clockwork.Clock) *Service {
	return &Service{
		spec: spec, port: port, env: environ(baseEnv, spec.Env, spec.PortEnv, port), resolveDir: resolveDir, clock: clock,
		log: NewRing(spec.LogBytes), tail: &tailBuffer{max: stderrTailBytes},
		status:  protocol.ServiceStatus{Name: spec.Name, State: protocol.ServiceStarting, Port: port, Spec: spec, StartedAt: clock.Now()},
		stopReq: make(chan struct{}), readyOrDone: make(chan struct{}), done: make(chan struct{}),
	}
}

// Log is the service's output, stdout and stderr interleaved in arrival order.
func (s *Service) Log() *Ring { return s.log }

// Done is closed once the service is stopped or failed.
func (s *Service) Done() <-chan struct{} { return s.done }

// Status reports the service now.
func (s *Service) Status() protocol.ServiceStatus {
	s.mu.Lock()
	st := s.status
	s.mu.Unlock()
	_, st.LogEnd = s.log.Bounds()
	return st
}

func (s *Service) final() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Service) update(f func(st *protocol.ServiceStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.status)
}

// Stop asks the supervisor to stop the service and waits until it has (ctx only bounds the
// waiting). A service that already ended answers with its final status.
func (s *Service) Stop(ctx context.Context, grace time.Duration) (protocol.ServiceStatus, error) {
	return s.stopFor(ctx, grace, "stopped on request")
}

// requestStop asks the supervisor for a stop without waiting for it; the first reason asked for
// is the one reported.
func (s *Service) requestStop(grace time.Duration, reason string) {
	if grace <= 0 {
		grace = DefaultGrace
	}
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.grace, s.stopReason = grace, reason
		s.mu.Unlock()
		close(s.stopReq)
	})
}

func (s *Service) stopFor(ctx context.Context, grace time.Duration, reason string) (protocol.ServiceStatus, error) {
	if s.final() {
		// Already over: its group is gone; nothing to stop.
		return s.Status(), nil
	}
	s.requestStop(grace, reason)
	select {
	case <-s.done:
	case <-ctx.Done():
		return s.Status(), ctx.Err()
	}
	st := s.Status()
	s.mu.Lock()
	err := s.stopErr
	s.mu.Unlock()
	if err != nil {
		return st, err
	}
	if st.State != protocol.ServiceStopped {
		return st, failure(st)
	}
	return st, nil
}

// finish records the final state. Only the supervisor calls it, once.
func (s *Service) finish(state, reason string, withTail bool) {
	s.update(func(st *protocol.ServiceStatus) {
		st.State, st.Reason, st.StoppedAt, st.PID = state, reason, s.clock.Now(), 0
		if withTail {
			st.StderrTail = s.tail.String()
		}
	})
	s.log.Close()
	close(s.done)
	s.readyOnce.Do(func() { close(s.readyOrDone) })
}

// supervise runs the service until it is stopped or has failed for good.
func (s *Service) supervise() {
	for {
		proc, err := s.launch()
		if err != nil {
			s.finish(protocol.ServiceFailed, fmt.Sprintf("start %q: %v", s.spec.Argv[0], err), true)
			return
		}
		switch s.awaitReady(proc) {
		case readyStop:
			s.stop(proc)
			return
		case readyTimeout:
			if err := killGroup(proc); err != nil {
				s.finish(protocol.ServiceFailed, fmt.Sprintf("not ready after %s; %v", time.Duration(s.spec.ReadyTimeout), err), true)
				return
			}
			s.finish(protocol.ServiceFailed, fmt.Sprintf("not ready after %s: %s; killed", time.Duration(s.spec.ReadyTimeout), s.readyCheck()), true)
			return
		case readyOK:
			s.update(func(st *protocol.ServiceStatus) {
				st.State, st.ReadyAt, st.Reason = protocol.ServiceReady, s.clock.Now(), ""
			})
			s.readyOnce.Do(func() { close(s.readyOrDone) })
			idleDone := s.watchIdle(proc)
			select {
			case <-s.stopReq:
				idleDone()
				s.stop(proc)
				return
			case <-proc.Done():
				idleDone()
			}
		case readyExited:
		}
		// The process exited on its own; whatever it left in its group goes with it.
		exit, _ := proc.Wait(context.Background())
		killErr := killGroup(proc)
		how := describeExit(exit)
		failed := exit.Code != 0 || exit.Signal != 0
		s.mu.Lock()
		restarts := s.status.Restarts
		s.mu.Unlock()
		switch {
		case killErr != nil:
			s.finish(protocol.ServiceFailed, how+"; "+killErr.Error(), true)
			return
		case !failed:
			s.finish(protocol.ServiceStopped, how, false)
			return
		case s.spec.Restart != "on-failure" || restarts >= s.spec.MaxRestarts:
			reason := how
			if restarts > 0 {
				reason += fmt.Sprintf(" after %d restarts", restarts)
			}
			s.finish(protocol.ServiceFailed, reason, true)
			return
		}
		s.update(func(st *protocol.ServiceStatus) {
			st.Restarts++
			st.State, st.Reason, st.PID = protocol.ServiceStarting, "restarting: "+how, 0
		})
		if !s.restartPause() {
			s.finish(protocol.ServiceStopped, s.reasonForStop(), false)
			return
		}
	}
}

// restartPause waits restartDelay before a restart; false when a stop was asked for meanwhile.
func (s *Service) restartPause() bool {
	t := s.clock.NewTimer(restartDelay)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-s.stopReq:
		return false
	}
}

// launch starts the command in a new process group, its output into the log.
func (s *Service) launch() (*process.Process, error) {
	dir, release, err := s.resolveDir(s.spec.Cwd)
	if err != nil {
		return nil, err
	}
	defer release()
	proc, err := process.Start(process.Spec{
		Argv: s.spec.Argv, Env: s.env, Dir: dir, Confiner: s.confiner, WorkDir: s.spec.Cwd,
		Stdout: s.log, Stderr: io.MultiWriter(s.log, s.tail),
	})
	if err != nil {
		return nil, err
	}
	s.update(func(st *protocol.ServiceStatus) { st.PID, st.StartedAt = proc.PID(), s.clock.Now() })
	return proc, nil
}

type readiness int

const (
	readyOK readiness = iota
	readyExited
	readyTimeout
	readyStop
)

// awaitReady probes the service until it answers, exits, runs out of time or is asked to stop.
// The ready timeout and the interval between probes are on the service's clock.
func (s *Service) awaitReady(proc *process.Process) readiness {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timeout := s.clock.AfterFunc(time.Duration(s.spec.ReadyTimeout), cancel)
	defer timeout.Stop()
	interval := time.Duration(s.spec.ReadyInterval)
	var next clockwork.Timer
	defer func() {
		if next != nil {
			next.Stop()
		}
	}()
	for {
		select {
		case <-s.stopReq:
			return readyStop
		case <-proc.Done():
			return readyExited
		default:
		}
		if s.probe(ctx) {
			// An answer from a process that has just died (a port someone else holds) is no
			// answer from the service.
			select {
			case <-proc.Done():
				return readyExited
			default:
				return readyOK
			}
		}
		if next == nil {
			next = s.clock.NewTimer(interval)
		} else {
			next.Reset(interval)
		}
		select {
		case <-s.stopReq:
			return readyStop
		case <-proc.Done():
			return readyExited
		case <-ctx.Done():
			return readyTimeout
		case <-next.Chan():
		}
	}
}

var probeClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// probe checks readiness once. Its own bound is on real time: it limits one connection
// attempt, which the kernel and the service answer in real time whatever the clock says.
func (s *Service) probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, time.Duration(s.spec.ReadyInterval)))
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	switch {
	case s.spec.Ready == ReadyNone:
		return true
	case s.spec.Ready == ReadyTCP:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	default:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+s.spec.Ready[len("http:"):], nil)
		if err != nil {
			return false
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	}
}

// readyCheck says what readiness waited for, to name it when it never came.
func (s *Service) readyCheck() string {
	if s.spec.Ready == ReadyTCP {
		return fmt.Sprintf("nothing accepted a connection on its port 127.0.0.1:%d (the command is given it in $%s)", s.port, s.spec.PortEnv)
	}
	return fmt.Sprintf("no 2xx/3xx answer to GET http://127.0.0.1:%d%s (the command is given its port in $%s)", s.port, s.spec.Ready[len("http:"):], s.spec.PortEnv)
}

// stop ends a running service on request: SIGTERM to the group, SIGKILL after the grace, then
// it waits for the group to be gone and the port to refuse connections.
func (s *Service) stop(proc *process.Process) {
	s.mu.Lock()
	grace := s.grace
	s.status.State = protocol.ServiceStopping
	s.mu.Unlock()
	pgid := proc.PID()
	_ = proc.Signal(syscall.SIGTERM)
	// The grace is on the service's clock; the pace of looking at the process table is real time.
	graceOver := s.clock.NewTimer(grace)
	defer graceOver.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
wait:
	for !groupGone(pgid, proc) {
		select {
		case <-graceOver.Chan():
			break wait
		case <-poll.C:
		}
	}
	var err error
	if !groupGone(pgid, proc) {
		err = killGroup(proc)
	}
	if err == nil {
		err = waitPortClosed(s.port)
	}
	if err != nil {
		s.mu.Lock()
		s.stopErr = protocol.Errorf(protocol.CodeFailed, "stop service %q: %v", s.spec.Name, err)
		s.mu.Unlock()
		s.finish(protocol.ServiceFailed, "stop: "+err.Error(), false)
		return
	}
	s.finish(protocol.ServiceStopped, s.reasonForStop(), false)
}

func (s *Service) reasonForStop() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopReason
}

// killGroup SIGKILLs the process group and waits until it is gone. goneTimeout bounds the
// kernel, not a policy, so it is on real time (as is waitPortClosed's).
func killGroup(proc *process.Process) error {
	pgid := proc.PID()
	proc.Cancel()
	deadline := time.Now().Add(goneTimeout)
	for !groupGone(pgid, proc) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still has processes %s after SIGKILL", pgid, goneTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// groupGone says whether the leader has been reaped and no process is left in the group.
func groupGone(pgid int, proc *process.Process) bool {
	select {
	case <-proc.Done():
	default:
		return false
	}
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// waitPortClosed waits until nothing accepts connections on the port any more.
func waitPortClosed(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(goneTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d still accepts connections after the process group is gone", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeExit(e process.Exit) string {
	if e.Signal != 0 {
		return fmt.Sprintf("killed by signal %d", e.Signal)
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func sortStatuses(s []protocol.ServiceStatus) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}
