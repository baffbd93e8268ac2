package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"filippo.io/age"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/console"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/controller/peer"
	"github.com/tetherhq/tether/controller/project"
	"github.com/tetherhq/tether/controller/providers"
	"github.com/tetherhq/tether/controller/savedcopy"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/plugins/provider"
)

// Config configures a controller.
type Config struct {
	DataDir string
	// AdvertiseURL is the base URL runners dial; empty means the listen address.
	AdvertiseURL string
	PluginDir    string // where tether-provider-* binaries live
	RunnerBinary string // static tether-runner handed to providers
	// ReadyTimeout bounds how long a new allocation may take to connect its runner.
	ReadyTimeout    time.Duration
	DefaultProvider string
	// MaxFileSize bounds one file write; 0 means no limit.
	MaxFileSize int64
	// BlobsURL picks the snapshot store: "" (a directory in the data dir), file:///DIR or
	// s3://BUCKET/PREFIX?endpoint=HOST:PORT.
	BlobsURL string
	// StoreURL picks the state store: "" (SQLite in the data dir) or postgres://….
	StoreURL string
	// SnapshotKeyFile holds the age identity snapshots are encrypted to (default DATA/snapshot.key,
	// generated on first start).
	SnapshotKeyFile string
	// EncryptSnapshots is "auto" (on for S3, off for a local directory), "true" or "false".
	EncryptSnapshots string
	// ProviderOptions configure provider plugins by name (their config schema says which keys).
	ProviderOptions map[string]map[string]string
	// SweepGrace is how old an object without a receipt must be before the startup sweep
	// removes it (another controller may be about to write its receipt).
	SweepGrace time.Duration
	// GitBinary is the git the controller runs for base clones (default "git" on PATH).
	GitBinary string
	// GCInterval runs a gc sweep that often with GCGrace (0: no periodic sweep).
	GCInterval time.Duration
	GCGrace    time.Duration
	// Retention is the default policy gc (and prune without one) applies to every workspace's
	// receipts; empty keeps everything.
	Retention api.RetentionPolicy
	// Clock is the controller's time (the real clock when nil): record stamps, lease waits, gc
	// grace, and the state store's lease expiry. Deadlines on connections stay on wall time.
	Clock   clockwork.Clock
	Logger  *slog.Logger
	Version string
	// HTTP bounds what a client may hold of the API server (zero fields take defaults).
	HTTP HTTPLimits
	// Runners bounds what one runner connection may make the controller hold (zero fields take
	// defaults).
	Runners RunnerLimits
	// ControllerID names this controller in the cluster (default: kept in DATA/controller.id,
	// made on first start).
	ControllerID string
	// PeerURL is the base URL other controllers reach this one on (default: the listen
	// address).
	PeerURL string
	// Membership is the heartbeat timing (zero: peer.DefaultTiming).
	Membership peer.Timing
	// CheckpointEvery is the default interval of automatic checkpoints for a workspace that has
	// none of its own (0: off).
	CheckpointEvery time.Duration
	// Idle is the default idle policy of a workspace without one of its own (nil: none; see
	// IdleDefault). WakeOnUse starts or reopens a stopped or closed workspace for any call that
	// uses it, as if every call asked for it (HeaderWake).
	Idle      *api.IdlePolicy
	WakeOnUse bool
	// ForwardPorts are the ports clients may reach in any workspace besides its services'
	// (tether serve --forward-ports): the operator's explicit list, empty by default.
	ForwardPorts forward.Ports
	// ForwardLimits bound the connections and bandwidth forwarded into each workspace.
	ForwardLimits forward.Limits
	// PreviewListener, when set with PreviewDomain, serves preview links by host name:
	// pv-ID.PreviewDomain reaches a link's service at / (tether serve --preview-listen).
	PreviewListener net.Listener
	PreviewDomain   string
	// MetricsListener, when set, serves GET /metrics without authentication, for a private
	// scrape network (tether serve --metrics-listen); the API listener's /metrics asks for a
	// token either way.
	MetricsListener net.Listener
}

// Server is a running controller.
type Server struct {
	cfg           Config
	log           *slog.Logger
	store         store.Store
	hub           *hub.Hub
	providers     *providers.Set
	operatorToken string
	// stoppingRuns holds, by run id, the note a quiesce that is stopping the run records as its
	// error (quiesceWhy.runNote): the runner's report of the run's end can arrive before the
	// quiesce's answer, and must say why the run ended all the same.
	stoppingRuns sync.Map
	// lostProbes confirm a sandbox gone before its workspace is lost (lost.go).
	lostProbes lostProbes
	// consoleSessions are the web console's signed-in browsers (in memory: a restart signs
	// them out).
	consoleSessions *console.Sessions
	advertise       string
	runnerSocket    string // host path of the unix socket runners may dial ("" without one)
	blobs           blob.Store
	identity        *age.X25519Identity
	encrypt         bool
	projects        *project.Projects
	archives        savedcopy.Archives
	savedIndexes    *savedcopy.Indexes // saved-copy read indexes, built once per receipt
	gcMu            sync.Mutex
	// gcStep, when set (tests), is called after each step of a reclaim; an error stops the
	// sweep there, as a crash would.
	gcStep   func(step string) error
	dataLock *dataLock

	// The cluster: this controller's id and membership, the secret peers authenticate with,
	// tunnels to runners peers hold, and what this controller is provisioning.
	id           string
	members      *peer.Membership
	peerSecret   string
	peerHTTP     *http.Client
	tunnels      tunnelCache
	requests     atomic.Int64 // API requests being served, hijacked ones included (drain)
	provisioning provisioning
	// stops is the set of workspaces this controller's StopWorkspace is stopping right now: the
	// upkeep never settles a stop that is still running here (settleStops).
	stops      provisioning
	hostLocals hostLocalCache
	uploads    *uploadTracker // heartbeats of this controller's running uploads
	// busy marks the workspaces this controller is capturing or restoring into: a checkpoint
	// skips them rather than wait. checkpointPassed, when set (tests), is called after each
	// pass of the checkpoint loop.
	busy             busySet
	checkpointPassed func()
	// activity is this controller's count of workspace use until it is flushed to the store;
	// idleRetry when a refused idle action may be tried again; wakes the wakes in progress.
	// idlePassed, when set (tests), is called after each pass of the idle loop.
	activity   activityTracker
	idleRetry  retryTimes
	wakes      wakes
	idlePassed func()
	// starts marks the runs this controller is starting (idempotent repeats wait for them).
	starts runStarts
	// forwards counts the connections (and paces the bytes) forwarded into each workspace.
	forwards *forward.Limiter
	// proxies are the HTTP proxy's transports into services, by workspace and service.
	proxies proxyPool
	// metrics is this controller's Prometheus registry, and the usage its runners report.
	metrics *metrics.Metrics

	// routines is the controller's background work, each a named routine: the API server and
	// the runner socket's, the gc loop, provisioning that outlives the request that started it,
	// runner connections' operations, capture checks, saved-index builds and checkout packs.
	// Serve's end stops it; nothing starts after that.
	routines *routine.Group
	ctx      context.Context // the routines' context: done once the controller shuts down

	// signals wakes waiters for a workspace's next receipt or state (create --wait-for-save).
	signals *wsSignals
}

// shutdownWait is how long Serve's end waits for the routines once their context is done before
// it logs, by name, those still running (and goes on waiting): each ends on it, but one may be in
// a call (a provider plugin, a blob store) that takes its time to notice.
const shutdownWait = 20 * time.Second

// New opens the data dir and state store. Call Serve to accept connections.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("controller: data dir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.DefaultProvider == "" {
		cfg.DefaultProvider = "local"
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	cfg.HTTP = cfg.HTTP.withDefaults()
	cfg.Runners = cfg.Runners.withDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// Taken before anything in the directory is read or written: a refused controller changes
	// nothing.
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.Release()
		}
	}()
	token, err := loadOperatorToken(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("operator token: %w", err)
	}
	if cfg.ControllerID == "" {
		if cfg.ControllerID, err = loadControllerID(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("controller id: %w", err)
		}
	}
	if cfg.Membership == (peer.Timing{}) {
		cfg.Membership = peer.DefaultTiming
	}
	st, err := sqlstore.Open(ctx, cfg.StoreURL, cfg.DataDir, sqlstore.WithClock(cfg.Clock))
	if err != nil {
		return nil, err
	}
	uploads := newUploadTracker(st, cfg.ControllerID, cfg.Clock, cfg.Logger)
	blobs, err := blob.Open(ctx, cfg.BlobsURL, filepath.Join(cfg.DataDir, "blobs"), blob.WithUploadTracker(uploads))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("blob store: %w", err)
	}
	runners := hub.New()
	meters := metrics.New(runners.Len)
	blobs = meters.CountBlobErrors(blobs)
	identity, err := savedcopy.LoadIdentity(firstNonEmpty(cfg.SnapshotKeyFile, filepath.Join(cfg.DataDir, "snapshot.key")))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("snapshot key: %w", err)
	}
	encrypt, err := savedcopy.EncryptionFor(cfg.EncryptSnapshots, cfg.BlobsURL)
	if err != nil {
		st.Close()
		return nil, err
	}
	secret, err := st.ClusterSecret(ctx)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	routines := routine.New(context.Background(), cfg.Logger)
	signals := newWSSignals()
	s := &Server{
		cfg: cfg, log: cfg.Logger, store: signalledStore{Store: meteredRuns{Store: st, m: meters}, signals: signals}, hub: runners, operatorToken: token, metrics: meters,
		providers: providers.New(cfg.PluginDir, filepath.Join(cfg.DataDir, "providers"), cfg.ProviderOptions, cfg.Logger,
			providers.OnRestart(meters.PluginRestarted)),
		blobs: blobs, identity: identity, encrypt: encrypt, dataLock: lock,
		routines: routines, ctx: routines.Context(),
		id: cfg.ControllerID, peerSecret: secret, peerHTTP: &http.Client{}, uploads: uploads,
		forwards:        forward.NewLimiter(cfg.ForwardLimits),
		consoleSessions: console.NewSessions(cfg.Clock, 0, 0),
		signals:         signals,
	}
	s.members = peer.NewMembership(st, store.Member{ID: s.id, Address: cfg.PeerURL, Version: cfg.Version, StartedAt: s.now()},
		cfg.Membership, cfg.Clock, cfg.Logger)
	if cfg.StoreURL == "" {
		// SQLite in this data directory, which this controller holds locked: it has no peers.
		s.members.SetAlone()
	}
	s.projects = project.New(project.Config{Store: st, DataDir: cfg.DataDir, GitBinary: cfg.GitBinary,
		NewID: newID, CheckName: checkName, ExpectKind: expectKind, Clock: cfg.Clock, Go: routines.Go})
	s.archives = savedcopy.Archives{Blobs: blobs, Identity: identity, Pin: s.pinReceipt, Go: s.routines.Go}
	s.savedIndexes = savedcopy.NewIndexes(filepath.Join(cfg.DataDir, "cache", "saved-index"), s.archives, cfg.Logger, routines.Go)
	// Housekeeping happens before anyone can connect, so no request sees the state a previous
	// process left: the runners this controller held died with it, and reconnect on their own.
	if _, err := st.DisownAllocations(ctx, s.id); err != nil {
		st.Close()
		routines.Stop()
		return nil, err
	}
	if err := s.sweepBlobsOnce(ctx); err != nil {
		s.log.Warn("blob sweep", "err", err)
	}
	// A base clone removal a crash interrupted is finished here, before any request runs.
	if err := gitsource.RemoveLeftovers(filepath.Join(cfg.DataDir, "projects")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("project leftovers", "err", err)
	}
	ok = true
	return s, nil
}

// OperatorToken is the local bootstrap credential of the REST API (API tokens are the others).
func (s *Server) OperatorToken() string { return s.operatorToken }

// Handler is the controller's HTTP API, each request logged and counted by the pattern it
// reached (see observe).
func (s *Server) Handler() http.Handler {
	mux, op := s.apiMux()
	return s.observe(mux, func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		if pattern == "/v1/" {
			_, pattern = op.Handler(r)
		}
		return pattern
	})
}

// apiMux is every route the controller serves: the front mux, and the operator API mounted in
// it at /v1/.
func (s *Server) apiMux() (*routeMux, *http.ServeMux) {
	mux := newRouteMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// A controller cut off from the store is no use to a balancer: it holds no runner and
		// can answer nothing. 503 takes it out of rotation until its heartbeat is written again.
		if !s.members.Owning() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no heartbeat written within the lapse", "version": s.cfg.Version, "id": s.id})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.cfg.Version, "id": s.id})
	})
	mux.HandleFunc("GET /v1/runners/connect", s.handleRunnerConnect)
	// The spec needs no token (see handleOpenAPI); a pattern more specific than /v1/ wins.
	mux.HandleFunc("GET /v1/openapi.json", handleOpenAPI)
	mux.Handle("GET /internal/v1/allocations/{id}/tunnel", s.requirePeer(http.HandlerFunc(s.handleTunnel)))
	mux.Handle("POST /internal/v1/allocations/{id}/evict", s.counted(s.requirePeer(http.HandlerFunc(s.handleEvict))))
	mux.Handle("POST /internal/v1/allocations/{id}/disconnect", s.counted(s.requirePeer(http.HandlerFunc(s.handleDisconnect))))
	mux.Handle("POST /internal/v1/allocations/{id}/stop", s.counted(s.requirePeer(s.handleSandboxOp(sandboxStop))))
	mux.Handle("POST /internal/v1/allocations/{id}/destroy", s.counted(s.requirePeer(s.handleSandboxOp(sandboxDestroy))))
	mux.Handle("POST /internal/v1/allocations/{id}/stop-keep", s.counted(s.requirePeer(s.handleSandboxOp(sandboxStopKeep))))
	mux.Handle("POST /internal/v1/allocations/{id}/start", s.counted(s.requirePeer(http.HandlerFunc(s.handleSandboxStart))))

	op := http.NewServeMux()
	for _, rt := range s.routes() {
		op.Handle(rt.pattern, s.guard(rt))
	}
	mux.Handle("/v1/", s.counted(s.peerOrOperator(s.requireOperator(op), op)))
	// Preview links carry their own token, not the operator's: outside /v1/ and its auth.
	mux.Handle("/p/{token}/{path...}", s.counted(http.HandlerFunc(s.handlePreviewPath)))
	mux.HandleFunc("/p/{token}", redirectSlash)
	// The web console: its page, and sign-in to a session the /v1 routes accept (consoleauth.go).
	ui := s.consoleHandler()
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	mux.Handle("GET /metrics", s.requireOperator(s.requireUnlimited(s.metrics.Handler())))
	return mux, op
}

// routes is the operator API: every route with who may call it (see routeScope).
func (s *Server) routes() []route {
	// Clients escape the whole workspace path as one segment (a/b → a%2Fb): the mux then hands
	// it to the runner's guard verbatim instead of cleaning or redirecting it first.
	const files = filesPattern
	rts := []route{
		{"GET /v1/providers", scopeOperator, s.handleListProviders},
		{"POST /v1/workspaces", scopeOperator, s.handleCreateWorkspace},
		{"GET /v1/workspaces", scopeList, s.handleListWorkspaces},
		{"GET /v1/workspaces/{id}", scopeWorkspace, s.handleGetWorkspace},
		{"PATCH /v1/workspaces/{id}", scopeWorkspace, s.handleUpdateWorkspace},
		{"POST /v1/workspaces/{id}/fork", scopeOperator, s.handleFork},
		{"DELETE /v1/workspaces/{id}", scopeWorkspace, s.handleDeleteWorkspace},
		{"PUT /v1/workspaces/{id}/tree", scopeWorkspace, s.handleTreeImport},
		{"GET /v1/workspaces/{id}/tree", scopeWorkspace, s.handleTreeExport},
		{"GET /v1/workspaces/{id}/watch", scopeWorkspace, s.handleWatch},
		{"GET /v1/workspaces/{id}/exec", scopeWorkspace, s.handleExec},
		{"GET /v1/workspaces/{id}/runs", scopeWorkspace, s.handleListRuns},
		{"POST /v1/workspaces/{id}/close", scopeWorkspace, s.handleClose},
		// Export writes into a directory of the controller's host: the operator's.
		{"POST /v1/workspaces/{id}/export", scopeOperator, s.handleExport},
		{"POST /v1/workspaces/{id}/reopen", scopeWorkspace, s.handleReopen},
		{"POST /v1/workspaces/{id}/recover", scopeWorkspace, s.handleRecover},
		{"POST /v1/workspaces/{id}/stop", scopeWorkspace, s.handleStop},
		{"POST /v1/workspaces/{id}/start", scopeWorkspace, s.handleStart},
		{"GET /v1/workspaces/{id}/events", scopeWorkspace, s.handleEvents},
		{"GET /v1/workspaces/{id}/inspect", scopeWorkspace, s.handleInspect},
		{"POST /v1/workspaces/{id}/reconcile", scopeWorkspace, s.handleReconcile},
		// The base of every later pull: set once, by whoever made the workspace.
		{"POST /v1/workspaces/{id}/source", scopeOperator, s.handleSetSource},
		{"POST /v1/workspaces/{id}/pull", scopeWorkspace, s.handlePull},
		{"POST /v1/workspaces/{id}/pulled", scopeWorkspace, s.handlePulled},
		{"GET /v1/workspaces/{id}/git/pack", scopeWorkspace, s.handleGitPack},
		{"POST /v1/projects", scopeOperator, s.handleCreateProject},
		{"GET /v1/projects", scopeList, s.handleListProjects},
		{"GET /v1/projects/{id}", scopeProject, s.handleGetProject},
		{"POST /v1/gc", scopeOperator, s.handleGC},
		// Storage spans every workspace: the operator's.
		{"GET /v1/storage", scopeOperator, s.handleStorage},
		{"GET /v1/runs/{id}", scopeRun, s.handleRunShow},
		{"GET /v1/runs/{id}/logs", scopeRun, s.handleRunLogs},
		{"GET /v1/runs/{id}/attach", scopeRun, s.handleRunAttach},
		{"POST /v1/runs/{id}/signal", scopeRun, s.handleRunSignal},
		{"POST /v1/runs/{id}/wait", scopeRun, s.handleRunWait},
		{"POST /v1/workspaces/{id}/lease", scopeWorkspace, s.handleLeaseAcquire},
		{"PUT /v1/workspaces/{id}/lease", scopeWorkspace, s.handleLeaseRenew},
		{"DELETE /v1/workspaces/{id}/lease", scopeWorkspace, s.handleLeaseRelease},
		{"GET /v1/workspaces/{id}/lease", scopeWorkspace, s.handleLeaseShow},
		{"POST /v1/workspaces/{id}/snapshots", scopeWorkspace, s.handleSnapshotCreate},
		{"GET /v1/workspaces/{id}/snapshots", scopeWorkspace, s.handleSnapshotList},
		{"POST /v1/workspaces/{id}/snapshots/prune", scopeWorkspace, s.handleSnapshotPrune},
		{"GET /v1/snapshots/{id}", scopeSnapshot, s.handleSnapshotShow},
		{"DELETE /v1/snapshots/{id}", scopeSnapshot, s.handleSnapshotRemove},
		// A restore creates a workspace, which a limited token could not see.
		{"POST /v1/snapshots/{id}/restore", scopeOperator, s.handleSnapshotRestore},
		{"GET /v1/snapshots/{id}/archive", scopeSnapshot, s.handleSnapshotArchive},
		{"POST /v1/snapshots/{id}/verify", scopeSnapshot, s.handleSnapshotVerify},
		{"POST /v1/snapshots/{id}/files", scopeSnapshot, s.handleSnapshotFiles},
		{"POST /v1/workspaces/{id}/artifacts", scopeWorkspace, s.handleArtifactPut},
		{"GET /v1/workspaces/{id}/artifacts", scopeWorkspace, s.handleArtifactList},
		{"GET /v1/artifacts/{id}", scopeArtifact, s.handleArtifactShow},
		{"POST /v1/artifacts/{id}/revoke", scopeArtifact, s.handleArtifactRevoke},
		{"POST /v1/workspaces/{id}/services", scopeWorkspace, s.handleServiceStart},
		{"GET /v1/workspaces/{id}/services", scopeWorkspace, s.handleServiceList},
		{"GET /v1/workspaces/{id}/services/{name}/logs", scopeWorkspace, s.handleServiceLogs},
		{"GET /v1/workspaces/{id}/services/{name}/endpoint", scopeWorkspace, s.handleServiceEndpoint},
		{"POST /v1/workspaces/{id}/services/{name}/stop", scopeWorkspace, s.handleServiceStop},
		{"GET /v1/workspaces/{id}/services/{name}/connect", scopeWorkspace, s.handleConnectService},
		{"GET /v1/workspaces/{id}/ports/{port}/connect", scopeWorkspace, s.handleConnectPort},
		// Any method: the proxy carries the app's own.
		{"/v1/workspaces/{id}/services/{name}/proxy/{path...}", scopeWorkspace, s.handleServiceProxy},
		{"/v1/workspaces/{id}/services/{name}/proxy", scopeWorkspace, s.handleServiceProxyRoot},
		{"POST /v1/workspaces/{id}/services/{name}/previews", scopeWorkspace, s.handlePreviewCreate},
		{"GET /v1/workspaces/{id}/services/{name}/previews", scopeWorkspace, s.handlePreviewList},
		{"DELETE /v1/workspaces/{id}/services/{name}/previews", scopeWorkspace, s.handlePreviewRevoke},
		{"POST /v1/workspaces/{id}/uploads", scopeWorkspace, s.handleUploadCreate},
		{"GET /v1/workspaces/{id}/uploads", scopeWorkspace, s.handleUploadList},
		{"GET /v1/workspaces/{id}/uploads/{upload}", scopeWorkspace, s.handleUploadGet},
		{"PUT /v1/workspaces/{id}/uploads/{upload}", scopeWorkspace, s.handleUploadChunk},
		{"DELETE /v1/workspaces/{id}/uploads/{upload}", scopeWorkspace, s.handleUploadAbort},
		{"GET " + files, scopeWorkspace, s.handleFilesGet},
		{"PUT " + files, scopeWorkspace, s.handleFilesPut},
		{"DELETE " + files, scopeWorkspace, s.handleFilesDelete},
		{"POST " + files, scopeWorkspace, s.handleFilesPost},
		// A limited token could otherwise make itself an unlimited one.
		{"POST /v1/tokens", scopeOperator, s.handleTokenCreate},
		{"GET /v1/tokens", scopeOperator, s.handleTokenList},
		{"DELETE /v1/tokens/{name}", scopeOperator, s.handleTokenRevoke},
	}
	for i, rt := range rts {
		if kind, ok := useRoutes[rt.pattern]; ok {
			rts[i].handle = s.inUse(kind, rt.handle)
		}
	}
	return rts
}

// Serve accepts connections on l until ctx ends, then drains (see drain) and shuts down: the
// controller's routines (the HTTP servers, runner connections' operations, exec bridges,
// provisioning, gc) are stopped and waited for (naming those left after shutdownWait), then
// provider plugins and the store are closed.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if s.cfg.AdvertiseURL != "" {
		s.advertise = s.cfg.AdvertiseURL
	} else {
		s.advertise = "http://" + l.Addr().String()
	}

	peerURL := firstNonEmpty(s.cfg.PeerURL, "http://"+l.Addr().String())
	s.members.SetAddress(peerURL)
	if err := s.members.Beat(ctx); err != nil {
		s.log.Warn("first heartbeat", "err", err)
	}
	s.routines.Go("heartbeat", func(ctx context.Context) { s.members.Run(ctx, s.dropRunners) })
	s.routines.Go("cluster upkeep", s.upkeep)

	s.serveRunnerSocket()
	errc := make(chan error, 1)
	srv := s.cfg.HTTP.server(s.Handler(), s.ctx)
	l = s.cfg.HTTP.limitListener(l)
	if !s.routines.Go("api server", func(ctx context.Context) { errc <- serveHTTP(ctx, srv, l) }) {
		l.Close()
		errc <- errors.New("controller: Serve after shutdown")
	}
	if pl := s.cfg.PreviewListener; pl != nil {
		psrv := s.cfg.HTTP.server(s.observe(s.previewHost(), func(*http.Request) string { return "preview host" }), s.ctx)
		pl = s.cfg.HTTP.limitListener(pl)
		if !s.routines.Go("preview server", func(ctx context.Context) { _ = serveHTTP(ctx, psrv, pl) }) {
			pl.Close()
		}
		s.log.Info("preview links served by host", "addr", pl.Addr().String(), "domain", s.cfg.PreviewDomain)
	}
	if ml := s.cfg.MetricsListener; ml != nil {
		s.serveMetrics(ml)
	}
	s.log.Info("controller listening", "addr", l.Addr().String(), "advertise", s.advertise, "data", s.cfg.DataDir, "id", s.id, "peer", peerURL)
	s.routines.Go("checkpoint loop", s.checkpointLoop)
	s.routines.Go("activity flush", s.activityLoop)
	s.routines.Go("idle sweep", s.idleLoop)
	if s.cfg.GCInterval > 0 {
		s.routines.Go("gc loop", func(ctx context.Context) { s.gcLoop(ctx, s.cfg.GCInterval, s.cfg.GCGrace) })
	}
	var err error
	select {
	case <-ctx.Done():
		s.drain(srv)
	case err = <-errc:
	}
	s.stopRoutines()
	s.providers.Close()
	if cerr := s.store.Close(); err == nil {
		err = cerr
	}
	s.dataLock.Release()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		s.log.Error("controller stopped", "err", err)
	} else {
		s.log.Info("controller stopped")
	}
	return err
}

// stopRoutines ends the controller's background work: their context is canceled (the HTTP
// servers shut down, runner connections and exec bridges close, the gc loop returns), no
// routine starts any more, and it waits for them, naming those left after shutdownWait.
func (s *Server) stopRoutines() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	// Tunnels are served by peers; closing them ends this controller's operations through them.
	defer s.tunnels.closeAll()
	if err := s.routines.StopContext(ctx); err != nil {
		// Still waited for: a provisioning routine may be destroying a sandbox it made, and
		// closing the plugins under it would leak the sandbox. The log says what it waits for.
		s.log.Warn("controller shutdown: still waiting for routines", "err", err)
		s.routines.Stop()
	}
}

// serveHTTP serves l with srv until ctx is done (or Serve fails), then shuts srv down: its
// listener closes at once, its requests get httpShutdownWait to finish.
func serveHTTP(ctx context.Context, srv *http.Server, l net.Listener) error {
	shut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shut)
		shutdownHTTP(srv)
	})
	err := srv.Serve(l)
	if stop() {
		// Serve failed on its own: the server's requests are ended here.
		shutdownHTTP(srv)
	} else {
		<-shut
	}
	return err
}

// httpShutdownWait bounds how long an HTTP server's shutdown waits for its requests.
const httpShutdownWait = 5 * time.Second

func shutdownHTTP(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// providerFor returns the named provider plugin, loading it on first use.
func (s *Server) providerFor(ctx context.Context, name string) (provider.Provider, error) {
	return s.providers.Get(ctx, name)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// now is the controller's clock in UTC, as every record stamps it.
func (s *Server) now() time.Time { return s.cfg.Clock.Now().UTC() }
