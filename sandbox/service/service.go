package service

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// Defaults for the optional fields of a spec.
const (
	DefaultLogBytes      = 1 << 20
	DefaultReadyTimeout  = 30 * time.Second
	DefaultReadyInterval = 100 * time.Millisecond
	DefaultMaxRestarts   = 3
	DefaultGrace         = 5 * time.Second
	// ReadyTCP (the default) is ready once a connection to the port is accepted; ReadyNone,
	// only when asked for, takes a started process as ready (a worker with no port).
	ReadyTCP  = "tcp"
	ReadyNone = "none"
	// stderrTailBytes is how much of a failed service's stderr is reported.
	stderrTailBytes = 4 << 10
	// goneTimeout bounds how long a killed group and its port may take to disappear.
	goneTimeout = 5 * time.Second
	// restartDelay separates a crash from the restart.
	restartDelay = 100 * time.Millisecond
)

// DirResolver turns a workspace-relative directory into one the child can chdir to; the returned
// func releases it once the child has started.
type DirResolver func(rel string) (dir string, release func(), err error)

// Manager holds a runner's services. Services belong to the manager, not to any connection: they
// keep running across controller disconnects.
type Manager struct {
	resolveDir DirResolver
	clock      clockwork.Clock
	// Confiner, when set before the first Start, isolates every service's processes.
	Confiner process.Confiner
	mu       sync.Mutex
	svcs     map[string]*Service
	// quiesced refuses new services while a close saves the workspace (see Quiesce).
	quiesced bool
}

// Option configures a Manager.
type Option func(*Manager)

// WithClock makes the manager's services read and wait on clock: their status stamps, readiness
// timeout and probe interval, restart delay, idle stop policy and stop grace. The default is the
// real clock. What bounds the kernel (a killed group's disappearance, a port closing) and the
// pace of polling it stay on real time: a fake clock there could only turn an error into a hang.
func WithClock(clock clockwork.Clock) Option {
	return func(m *Manager) { m.clock = clock }
}

// NewManager makes a manager; resolveDir guards each service's working directory.
func NewManager(resolveDir DirResolver, opts ...Option) *Manager {
	m := &Manager{resolveDir: resolveDir, clock: clockwork.NewRealClock(), svcs: map[string]*Service{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Start starts spec with baseEnv under it and waits until the service is observed ready (or has
// failed, or ctx ends: the service keeps starting then). A failure comes back as an error with
// code failed or timeout whose message carries the reason and the stderr tail.
func (m *Manager) Start(ctx context.Context, spec protocol.ServiceSpec, baseEnv []string) (protocol.ServiceStatus, error) {
	if err := normalize(&spec); err != nil {
		return protocol.ServiceStatus{}, err
	}
	m.mu.Lock()
	if m.quiesced {
		m.mu.Unlock()
		return protocol.ServiceStatus{}, protocol.Errorf(protocol.CodeConflict, "the workspace is being closed: service %q is not started", spec.Name)
	}
	if old, ok := m.svcs[spec.Name]; ok && !old.final() {
		m.mu.Unlock()
		return protocol.ServiceStatus{}, protocol.Errorf(protocol.CodeExists, "service %q is already %s", spec.Name, old.Status().State)
	}
	port := spec.Port
	if port == 0 {
		p, err := freePort()
		if err != nil {
			m.mu.Unlock()
			return protocol.ServiceStatus{}, protocol.Errorf(protocol.CodeFailed, "pick a port: %v", err)
		}
		port = p
	}
	s := newService(spec, port, baseEnv, m.resolveDir, m.clock)
	s.confiner = m.Confiner
	m.svcs[spec.Name] = s
	m.mu.Unlock()
	go s.supervise()
	select {
	case <-s.readyOrDone:
	case <-ctx.Done():
		return s.Status(), ctx.Err()
	}
	st := s.Status()
	if st.State == protocol.ServiceReady {
		return st, nil
	}
	return st, failure(st)
}

// failure is the error a start or stop answers with when the service did not get where asked.
func failure(st protocol.ServiceStatus) error {
	code := protocol.CodeFailed
	if strings.HasPrefix(st.Reason, "not ready") {
		code = protocol.CodeTimeout
	}
	msg := fmt.Sprintf("service %q %s: %s", st.Name, st.State, st.Reason)
	if st.StderrTail != "" {
		msg += "\nstderr (last 4 KiB):\n" + st.StderrTail
	}
	return protocol.Errorf(code, "%s", msg)
}

// Get finds a service by name.
func (m *Manager) Get(name string) (*Service, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.svcs[name]
	if !ok {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no service %q", name)
	}
	return s, nil
}

// List reports every service, sorted by name.
func (m *Manager) List() []protocol.ServiceStatus {
	m.mu.Lock()
	svcs := make([]*Service, 0, len(m.svcs))
	for _, s := range m.svcs {
		svcs = append(svcs, s)
	}
	m.mu.Unlock()
	out := make([]protocol.ServiceStatus, 0, len(svcs))
	for _, s := range svcs {
		out = append(out, s.Status())
	}
	sortStatuses(out)
	return out
}

// Stop stops a service: SIGTERM to its group, SIGKILL after grace (0: DefaultGrace), and answers
// once the group is gone and the port refuses connections.
func (m *Manager) Stop(ctx context.Context, name string, grace time.Duration) (protocol.ServiceStatus, error) {
	s, err := m.Get(name)
	if err != nil {
		return protocol.ServiceStatus{}, err
	}
	return s.Stop(ctx, grace)
}

// StopAll stops every service at once with grace, as a runner shutting down does.
func (m *Manager) StopAll(grace time.Duration) {
	m.mu.Lock()
	svcs := make([]*Service, 0, len(m.svcs))
	for _, s := range m.svcs {
		svcs = append(svcs, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Stop(context.Background(), grace)
		}()
	}
	wg.Wait()
}

// normalize checks spec and fills its defaults.
func normalize(spec *protocol.ServiceSpec) error {
	bad := func(format string, args ...any) error {
		return protocol.Errorf(protocol.CodeInvalidArgument, format, args...)
	}
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00") {
		return bad("a service needs a name without slashes")
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return bad("service %q needs a command", spec.Name)
	}
	if spec.Port < 0 || spec.Port > 65535 {
		return bad("port %d is out of range", spec.Port)
	}
	if spec.PortEnv == "" {
		spec.PortEnv = "PORT"
	}
	switch {
	case spec.Ready == "":
		// A started process is not yet a service: without a check asked for, ready means
		// something accepts connections on the service's port.
		spec.Ready = ReadyTCP
	case spec.Ready == ReadyTCP, spec.Ready == ReadyNone:
	case strings.HasPrefix(spec.Ready, "http:"):
		if !strings.HasPrefix(strings.TrimPrefix(spec.Ready, "http:"), "/") {
			return bad("readiness %q: the path must start with /", spec.Ready)
		}
	default:
		return bad("readiness %q: want http:PATH, tcp or none", spec.Ready)
	}
	if spec.ReadyTimeout <= 0 {
		spec.ReadyTimeout = protocol.Duration(DefaultReadyTimeout)
	}
	if spec.ReadyInterval <= 0 {
		spec.ReadyInterval = protocol.Duration(DefaultReadyInterval)
	}
	switch spec.Restart {
	case "":
		spec.Restart = "never"
	case "never", "on-failure":
	default:
		return bad("restart policy %q: want never or on-failure", spec.Restart)
	}
	if spec.Restart == "on-failure" && spec.MaxRestarts <= 0 {
		spec.MaxRestarts = DefaultMaxRestarts
	}
	switch {
	case spec.StopPolicy == "":
		spec.StopPolicy = StopManual
	case spec.StopPolicy == StopManual:
	case spec.StopPolicy == StopOnRunFinish:
		if spec.Run == "" {
			return bad("stop policy on-run-finish needs the run it belongs to")
		}
	case strings.HasPrefix(spec.StopPolicy, idlePrefix):
		if _, ok := idleFor(spec.StopPolicy); !ok {
			return bad("stop policy %q: want idle:DURATION, e.g. idle:10m", spec.StopPolicy)
		}
	default:
		return bad("stop policy %q: want manual, on-run-finish or idle:DURATION", spec.StopPolicy)
	}
	if spec.LogBytes <= 0 {
		spec.LogBytes = DefaultLogBytes
	}
	for _, kv := range spec.Env {
		if !strings.Contains(kv, "=") {
			return bad("environment entry %q is not K=V", kv)
		}
	}
	return nil
}

// freePort asks the kernel for a free loopback port and gives it back for the service to take.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// environ builds the child's environment: base, then the spec's entries, then the port.
func environ(base, extra []string, portEnv string, port int) []string {
	env := make([]string, 0, len(base)+len(extra)+1)
	seen := map[string]int{}
	for _, kv := range append(append(append([]string{}, base...), extra...), portEnv+"="+strconv.Itoa(port)) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			env[i] = kv
			continue
		}
		seen[k] = len(env)
		env = append(env, kv)
	}
	return env
}
