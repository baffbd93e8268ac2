package provider

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/tetherhq/tether/plugins/provider/providerpb"
)

// watchdogInterval is how often a plugin checks that its host is alive.
const watchdogInterval = 500 * time.Millisecond

// Serve runs p as a provider plugin and never returns. Call it from the
// plugin's main. Logs go to stderr as JSON, which the host re-logs through its
// own logger; stdout belongs to the go-plugin handshake and must stay quiet.
func Serve(p Provider) {
	level := hclog.LevelFromString(os.Getenv(envLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "provider",
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})

	go watchParent(logger, expectedParent())
	go outliveSIGTERM(logger)

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: pluginSets(p),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           logger,
	})
	// plugin.Serve returns only when the host shut us down cleanly.
	os.Exit(0)
}

// outliveSIGTERM keeps the plugin up through a SIGTERM: its host ends it (go-plugin's Kill once
// the host is done with it, or the watchdog once the host is gone). A SIGTERM sent to the whole
// process group — systemd stopping the service, kill -TERM -PGID — would otherwise end it
// while the host is still draining (a provisioning may be destroying a sandbox through it), and
// the host would log its exit as an error. go-plugin's Serve already does the same with SIGINT.
// The signal is caught, not ignored: an ignored one would stay ignored in what the plugin runs.
func outliveSIGTERM(logger hclog.Logger) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	for range ch {
		logger.Debug("SIGTERM ignored: the host ends this plugin")
	}
}

// expectedParent is the host's pid as the host told us, falling back to our
// current parent. Taking it from the host closes the window where the host
// dies before this process reads its parent pid.
func expectedParent() int {
	if v, err := strconv.Atoi(os.Getenv(envParentPID)); err == nil && v > 0 {
		return v
	}
	return os.Getppid()
}

// watchParent exits the plugin once its host is gone. The host also sets
// Pdeathsig, but that signal fires when the host *thread* that forked us
// exits, and is lost if the host died before our prctl ran; polling the
// parent pid catches every case, including a SIGKILLed host.
func watchParent(logger hclog.Logger, parent int) {
	for {
		if os.Getppid() != parent {
			logger.Warn("host process is gone, exiting", "parent", parent)
			os.Exit(3)
		}
		time.Sleep(watchdogInterval)
	}
}

// baseServer exposes a Provider's Base methods as the Base service.
type baseServer struct {
	providerpb.UnimplementedBaseServer
	impl Provider
}

func (s *baseServer) Info(ctx context.Context, _ *providerpb.InfoRequest) (*providerpb.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.InfoResponse{
		Name:         info.Name,
		Version:      info.Version,
		Capabilities: info.Capabilities,
		ConfigSchema: info.ConfigSchema,
	}, nil
}

func configFromPB(c *providerpb.Config) Config {
	return Config{StateDir: c.GetStateDir(), Options: c.GetOptions()}
}

func (s *baseServer) ValidateConfig(ctx context.Context, req *providerpb.ValidateConfigRequest) (*providerpb.ValidateConfigResponse, error) {
	if err := s.impl.ValidateConfig(ctx, configFromPB(req.GetConfig())); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.ValidateConfigResponse{}, nil
}

func (s *baseServer) Configure(ctx context.Context, req *providerpb.ConfigureRequest) (*providerpb.ConfigureResponse, error) {
	if err := s.impl.Configure(ctx, configFromPB(req.GetConfig())); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.ConfigureResponse{}, nil
}

// grpcServer exposes a Provider as the Provider service.
type grpcServer struct {
	providerpb.UnimplementedProviderServer
	impl Provider
}

func (s *grpcServer) Create(ctx context.Context, req *providerpb.CreateRequest) (*providerpb.CreateResponse, error) {
	res := req.GetResources()
	alloc, err := s.impl.Create(ctx, CreateRequest{
		WorkspaceID:      req.GetWorkspaceId(),
		AllocationID:     req.GetAllocationId(),
		ControllerURL:    req.GetControllerUrl(),
		RunnerToken:      req.GetRunnerToken(),
		RunnerBinary:     req.GetRunnerBinary(),
		Env:              req.GetEnv(),
		Resources:        Resources{CPUs: res.GetCpus(), MemoryMiB: res.GetMemoryMib(), Pids: res.GetPids()},
		Labels:           req.GetLabels(),
		Options:          req.GetOptions(),
		ControllerSocket: req.GetControllerSocket(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.CreateResponse{Allocation: &providerpb.Allocation{
		Id:   alloc.ID,
		Root: alloc.Root,
		Info: alloc.Info,
	}}, nil
}

func (s *grpcServer) Inspect(ctx context.Context, req *providerpb.InspectRequest) (*providerpb.InspectResponse, error) {
	st, err := s.impl.Inspect(ctx, req.GetAllocationId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.InspectResponse{State: string(st.State), Reason: st.Reason}, nil
}

func (s *grpcServer) Start(ctx context.Context, req *providerpb.StartRequest) (*providerpb.StartResponse, error) {
	err := s.impl.Start(ctx, StartRequest{
		AllocationID:  req.GetAllocationId(),
		RunnerToken:   req.GetRunnerToken(),
		ControllerURL: req.GetControllerUrl(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.StartResponse{}, nil
}

func (s *grpcServer) Stop(ctx context.Context, req *providerpb.StopRequest) (*providerpb.StopResponse, error) {
	if err := s.impl.Stop(ctx, req.GetAllocationId()); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.StopResponse{}, nil
}

func (s *grpcServer) Archive(ctx context.Context, req *providerpb.ArchiveRequest) (*providerpb.ArchiveResponse, error) {
	if err := s.impl.Archive(ctx, req.GetAllocationId()); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.ArchiveResponse{}, nil
}

func (s *grpcServer) Destroy(ctx context.Context, req *providerpb.DestroyRequest) (*providerpb.DestroyResponse, error) {
	if err := s.impl.Destroy(ctx, req.GetAllocationId()); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.DestroyResponse{}, nil
}

func (s *grpcServer) Endpoint(ctx context.Context, req *providerpb.EndpointRequest) (*providerpb.EndpointResponse, error) {
	ep, err := s.impl.Endpoint(ctx, req.GetAllocationId(), int(req.GetPort()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.EndpointResponse{Url: ep.URL, Headers: ep.Headers}, nil
}

func (s *grpcServer) InstallRunner(ctx context.Context, req *providerpb.InstallRunnerRequest) (*providerpb.InstallRunnerResponse, error) {
	if err := s.impl.InstallRunner(ctx, req.GetAllocationId(), req.GetRunnerBinary()); err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.InstallRunnerResponse{}, nil
}

func (s *grpcServer) ExportFiles(ctx context.Context, req *providerpb.ExportFilesRequest) (*providerpb.ExportFilesResponse, error) {
	ex, ok := s.impl.(Exporter)
	if !ok {
		return nil, toStatus(Errorf(CodeUnsupported, "provider does not export files"))
	}
	res, err := ex.ExportFiles(ctx, ExportRequest{
		AllocationID: req.GetAllocationId(),
		Dest:         req.GetDest(),
		MaxBytes:     req.GetMaxBytes(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerpb.ExportFilesResponse{Files: int64(res.Files), Bytes: res.Bytes, Skipped: res.Skipped}, nil
}
