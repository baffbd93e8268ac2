package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/confine"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/runlog"
	"github.com/tetherhq/tether/sandbox/service"
)

// Config is everything a runner needs; cmd/tether-runner fills it from the environment.
type Config struct {
	ControllerURL string // http(s)://host:port of the controller
	Token         string // one-use bootstrap token
	AllocationID  string
	Root          string // workspace root
	Version       string
	Env           []string // base environment for commands
	Logger        *slog.Logger
	// Confine says how the agent's commands are kept apart from the runner (sandbox/confine).
	Confine confine.Policy
	// Backoff bounds between reconnect attempts.
	MinBackoff, MaxBackoff time.Duration
	// Clock is the runner's time (the real clock when nil): reconnect and report back-offs, a
	// quiesce's grace, the output grace after a command exits, install stamps, and its services'
	// time (sandbox/service.WithClock). Deadlines on connections and streams are not on it (see
	// reportOn), nor are the bounds on how long the kernel takes to remove a killed group.
	Clock clockwork.Clock
	// StateDir is the runner's private state directory (never in the workspace, out of the
	// agent's reach): it holds the capture cache that makes incremental captures cheap. Empty
	// means no cache: every capture is full.
	StateDir string
	// UsageSource is where the usage reports' CPU and memory come from: UsageCgroup (when the
	// cgroup can be read) or UsageProc (the default).
	UsageSource string
	// RunLogMaxBytes bounds the output kept per run, RunLogsMaxBytes all runs' together
	// (sandbox/runlog; zero: its defaults, 128 MiB and 1 GiB). The logs live in StateDir/runs,
	// or a private temporary directory without one.
	RunLogMaxBytes, RunLogsMaxBytes int64
}

// Runner is one runner agent.
type Runner struct {
	cfg        Config
	cacheTrees cacheTrees
	runs       *runTable
	logs       *runlog.Store
	services   *service.Manager
	// policy confines every command; Run completes it (agent socket, runner binary) before
	// serving.
	policy confine.Policy
	// root is how the runner opens its workspace root: cfg.Root, or a descriptor path once
	// isolate took the runner's file access down to the agent's.
	root string
	// ctl is how the controller is dialed (a unix socket's directory is opened in New).
	ctl *controllerDial
	// holds are the runner's own temporary files and staging directories in the workspace while
	// a write or restore is in flight: the only reserved-looking names a capture leaves out.
	holds *fsguard.Holds
	// uploads are the resumable uploads staged in the runner's private state directory.
	uploads *uploadTable

	// routines are the goroutines serving the controller's streams: they outlive a connection,
	// and Shutdown waits for them (a while: see stopWait) once the runner's commands are gone.
	routines *routine.Group

	mu    sync.Mutex
	token string         // bootstrap token first, session token once the controller granted one
	sess  *yamux.Session // the live connection, nil between connections

	// epoch is the highest writer epoch seen; mutating operations with an older one are
	// refused. It only grows.
	epoch atomic.Uint64
}

// ErrRefused is returned by Run when the controller refuses the runner's credentials: retrying
// cannot help, so the runner exits.
var ErrRefused = errors.New("controller refused the runner")

// New checks cfg and makes a runner.
func New(cfg Config) (*Runner, error) {
	if cfg.ControllerURL == "" || cfg.Token == "" || cfg.AllocationID == "" || cfg.Root == "" {
		return nil, errors.New("runner: controller URL, token, allocation id and root are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	r := &Runner{cfg: cfg, runs: newRunTable(), token: cfg.Token, routines: routine.New(context.Background(), cfg.Logger), policy: cfg.Confine, root: cfg.Root, holds: fsguard.NewHolds(), uploads: newUploadTable(cfg.StateDir)}
	logDir := ""
	if cfg.StateDir != "" {
		logDir = filepath.Join(cfg.StateDir, "runs")
	}
	// Created with the first run, once isolate set the runner's file ids.
	r.logs = runlog.NewStore(logDir, runlog.Options{MaxRunBytes: cfg.RunLogMaxBytes, MaxTotalBytes: cfg.RunLogsMaxBytes})
	r.services = service.NewManager(r.resolveDir, service.WithClock(cfg.Clock))
	r.services.Confiner = r
	ctl, err := newControllerDial(cfg.ControllerURL)
	if err != nil {
		return nil, err
	}
	r.ctl = ctl
	return r, nil
}

// Run connects and serves until ctx ends or the controller refuses the runner. Socket drops are
// retried with exponential backoff; commands keep running meanwhile.
func (r *Runner) Run(ctx context.Context) error {
	// The agent socket lets tools inside the sandbox reach the runner; every command the runner
	// starts finds it in TETHER_SOCKET. Without it the runner still serves the controller.
	var agentSocket string
	if sock, stopAgent, err := r.startAgent(ctx); err != nil {
		r.cfg.Logger.Warn("no agent socket", "err", err)
	} else {
		defer stopAgent()
		r.cfg.Env = setEnv(r.cfg.Env, protocol.EnvSocket, sock)
		agentSocket = sock
	}
	if err := r.isolate(agentSocket); err != nil {
		return fmt.Errorf("%w: cannot confine the agent: %v", ErrRefused, err)
	}
	r.routines.Go("usage reports", func(stop context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(stop, cancel)()
		r.reportUsage(ctx)
	})
	backoff := r.cfg.MinBackoff
	for {
		served, err := r.connectAndServe(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if served {
			backoff = r.cfg.MinBackoff
		}
		r.cfg.Logger.Warn("connection to controller lost; reconnecting", "err", err, "in", backoff)
		jitter := time.Duration(rand.Int64N(int64(backoff)/5 + 1))
		if !r.pause(ctx.Done(), backoff+jitter) {
			return ctx.Err()
		}
		backoff = min(backoff*2, r.cfg.MaxBackoff)
	}
}

// stopWait bounds how long a stopping runner waits for its streams' handlers once its commands
// were killed: they end as their streams and commands do.
const stopWait = 2 * time.Second

// stopRoutines stops taking streams and waits up to stopWait for the handlers still running,
// naming them when some are left.
func (r *Runner) stopRoutines() {
	ctx, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	if err := r.routines.StopContext(ctx); err != nil {
		r.cfg.Logger.Warn("runner stopping", "err", err)
	}
}

// pause waits d on the runner's clock; false when cancel closes first.
func (r *Runner) pause(cancel <-chan struct{}, d time.Duration) bool {
	t := r.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-cancel:
		return false
	}
}

// Shutdown kills every command the runner started and stops its services (SIGTERM, then SIGKILL
// after shutdownGrace). It is called on SIGTERM so that stopping an allocation stops all its
// work, not only the runner.
func (r *Runner) Shutdown() {
	r.runs.killAll()
	r.services.StopAll(shutdownGrace)
	// Only now, with its commands gone, can an exec's handler end.
	r.stopRoutines()
	r.uploads.close()
	if err := r.logs.Close(); err != nil {
		r.cfg.Logger.Warn("remove run logs", "err", err)
	}
}

func (r *Runner) connectAndServe(ctx context.Context) (served bool, err error) {
	u, dialer := r.ctl.url, r.ctl.dialer()
	h := http.Header{}
	r.mu.Lock()
	h.Set("Authorization", protocol.Bearer(r.token))
	r.mu.Unlock()
	ws, resp, err := dialer.DialContext(ctx, u, h)
	if err != nil {
		return false, dialError(resp, err)
	}
	conn := protocol.NewWSConn(ws)
	defer conn.Close()
	sess, err := protocol.MuxClient(conn)
	if err != nil {
		return false, err
	}
	defer sess.Close()
	if err := r.hello(ctx, sess); err != nil {
		return false, err
	}
	r.cfg.Logger.Info("connected to controller", "url", u)
	r.setSession(sess)
	defer r.setSession(nil)
	return true, r.serve(ctx, sess)
}

func (r *Runner) setSession(s *yamux.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sess = s
}

// reportRunExit tells the controller about a run that finished while detached. Without a live
// connection it does nothing: the next hello carries the run's status instead.
func (r *Runner) reportRunExit(st protocol.RunStatus) {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess == nil {
		r.cfg.Logger.Info("run finished while disconnected; the next hello reports it", "run", st.RunID)
		return
	}
	// A report that fails on a live session (the controller's store was busy, say) is retried
	// until it is recorded or the session ends: before a reconnect's hello carries it, nothing
	// else would settle the run. A refusal that no retry changes ends it.
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := reportOn(sess, st)
		if err == nil {
			r.cfg.Logger.Info("reported detached run exit", "run", st.RunID)
			return
		}
		switch protocol.CodeOf(err) {
		case protocol.CodeNotFound, protocol.CodeUnsupported, protocol.CodeInvalidArgument:
			r.cfg.Logger.Warn("detached run exit refused", "run", st.RunID, "err", err)
			return
		}
		if sess.IsClosed() {
			r.cfg.Logger.Info("report detached run exit: the session ended; the next hello reports it", "run", st.RunID, "attempts", attempt)
			return
		}
		if attempt == 3 {
			r.cfg.Logger.Warn("report detached run exit; retrying", "run", st.RunID, "err", err)
		}
		r.pause(sess.CloseChan(), backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

func reportOn(sess *yamux.Session, st protocol.RunStatus) error {
	return callOn(sess, protocol.OpRunExited, st)
}

// callOn opens a runner→controller operation on sess with args and reads the controller's
// answer (one trailer).
func callOn(sess *yamux.Session, op string, args any) error {
	stream, err := sess.OpenStream()
	if err != nil {
		return err
	}
	defer stream.Close()
	// A deadline on a stream or a connection is on the wall clock, never the runner's Clock:
	// yamux and the kernel compare it with real time, and a fake "now" would set it in the past.
	_ = stream.SetDeadline(time.Now().Add(30 * time.Second))
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	if err := protocol.WriteJSON(stream, protocol.Header{Op: op, Args: raw}); err != nil {
		return err
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(stream, &tr); err != nil {
		return err
	}
	return tr.Err()
}

func connectURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("controller URL %q: scheme must be http or https", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + protocol.ConnectPath
	return u.String(), nil
}

// fence admits a mutating operation carrying epoch e, raising the runner's epoch to e, or
// refuses it with stale_epoch when a newer writer has been seen.
func (r *Runner) fence(e uint64) error {
	for {
		cur := r.epoch.Load()
		if e < cur {
			return protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d is stale: the workspace's writer epoch is %d", e, cur)
		}
		if e == cur || r.epoch.CompareAndSwap(cur, e) {
			return nil
		}
	}
}
