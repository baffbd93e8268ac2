package provider

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/tetherhq/tether/plugins/provider/providerpb"
)

// defaultStartTimeout bounds the plugin handshake when ctx has no deadline.
const defaultStartTimeout = 30 * time.Second

// Client is a loaded provider plugin. It implements Provider by calling the
// plugin process; Close kills that process.
type Client struct {
	Provider
	plugin *plugin.Client
	proto  plugin.ClientProtocol
	pid    int
	tail   *tailWriter
}

var _ Provider = (*Client)(nil)

// Open starts the provider plugin binary at path and connects to it. ctx
// bounds only the start and handshake, not the plugin's lifetime: the plugin
// lives until Close, or until this process dies.
func Open(ctx context.Context, path string, logger hclog.Logger) (*Client, error) {
	// Pdeathsig is the fast path for a dying host; the plugin's own
	// watchdog (see Serve) covers the cases it misses.
	return open(ctx, path, logger, &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
}

// open is Open with the plugin's SysProcAttr exposed, so tests can check the
// plugin-side watchdog on its own.
func open(ctx context.Context, path string, logger hclog.Logger, attr *syscall.SysProcAttr) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open provider %s: %w", path, err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("provider plugin path %q: %w", path, err)
	}
	// Deliberately not exec.CommandContext: cancelling ctx after Open
	// returns must not kill the plugin.
	cmd := exec.Command(abs)
	cmd.Env = pluginEnv(os.Environ(), os.Getpid())
	if lvl := logger.GetLevel(); lvl != hclog.NoLevel && lvl != hclog.Off {
		cmd.Env = append(cmd.Env, envLogLevel+"="+lvl.String())
	}
	cmd.SysProcAttr = attr

	startTimeout := defaultStartTimeout
	if dl, ok := ctx.Deadline(); ok {
		startTimeout = time.Until(dl)
		if startTimeout <= 0 {
			return nil, fmt.Errorf("open provider %s: %w", abs, context.DeadlineExceeded)
		}
	}

	// A plugin's stray writes to its os.Stdout/os.Stderr come back over the
	// gRPC stdio stream; route them through the logger too. go-plugin
	// already names its own plugin log lines after the binary.
	stdio := logger.Named(filepath.Base(abs)).StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	// The last lines the plugin wrote, whatever the log level: they explain
	// a crash (a panic's stack goes straight to its stderr).
	tail := newTailWriter(tailLines)
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: pluginSets(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Managed:          false,
		// pluginEnv already carries the host environment.
		SkipHostEnv:  true,
		Logger:       logger,
		StartTimeout: startTimeout,
		SyncStdout:   stdio,
		SyncStderr:   io.MultiWriter(stdio, tail),
		Stderr:       tail,
	})

	type result struct {
		raw   any
		proto plugin.ClientProtocol
		err   error
	}
	done := make(chan result, 1)
	// The fork happens on this goroutine's thread. It never locks that
	// thread, and Go only ends threads of goroutines that exit locked, so
	// the thread outlives the fork and Pdeathsig fires only when the host
	// process dies.
	go func() {
		rpc, err := pc.Client()
		if err != nil {
			done <- result{err: err}
			return
		}
		raw, err := rpc.Dispense(pluginName)
		done <- result{raw: raw, proto: rpc, err: err}
	}()

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		// Kill waits for the handshake goroutine to release the client,
		// so do it off the caller's path.
		go func() {
			<-done
			pc.Kill()
		}()
		return nil, fmt.Errorf("open provider %s: %w", abs, ctx.Err())
	}
	if res.err != nil {
		pc.Kill()
		if lines := tail.Lines(); len(lines) > 0 {
			return nil, fmt.Errorf("open provider %s: %w (plugin output: %s)", abs, res.err, strings.Join(lines, " | "))
		}
		return nil, fmt.Errorf("open provider %s: %w", abs, res.err)
	}
	impl, ok := res.raw.(*grpcClient)
	if !ok {
		pc.Kill()
		return nil, fmt.Errorf("open provider %s: unexpected plugin type %T", abs, res.raw)
	}
	return &Client{Provider: impl, plugin: pc, proto: res.proto, pid: cmd.Process.Pid, tail: tail}, nil
}

// pingTimeout bounds Ping: the health service answers on its own
// goroutines, so only a wedged or stopped process takes longer.
const pingTimeout = 5 * time.Second

// Ping checks that the plugin process still answers.
func (c *Client) Ping() error {
	if c.plugin.Exited() {
		return Errorf(CodeUnavailable, "plugin process has exited")
	}
	done := make(chan error, 1)
	go func() { done <- c.proto.Ping() }()
	select {
	case err := <-done:
		if err != nil {
			return Errorf(CodeUnavailable, "plugin does not answer: %v", err)
		}
		return nil
	case <-time.After(pingTimeout):
		return Errorf(CodeUnavailable, "plugin did not answer a ping within %s", pingTimeout)
	}
}

// ExportFiles calls the plugin's ExportFiles (see Exporter). A plugin
// built before the RPC existed answers CodeUnsupported.
func (c *Client) ExportFiles(ctx context.Context, req ExportRequest) (ExportResult, error) {
	if ex, ok := c.Provider.(Exporter); ok {
		return ex.ExportFiles(ctx, req)
	}
	return ExportResult{}, Errorf(CodeUnsupported, "provider does not export files")
}

// LastOutput returns the last lines the plugin wrote to its stderr (its
// logs, a panic's stack), oldest first.
func (c *Client) LastOutput() []string {
	return c.tail.Lines()
}

// Close kills the plugin process. Allocations it started keep running; a
// later plugin process can still Stop or Destroy them.
func (c *Client) Close() {
	c.plugin.Kill()
}

// Pid is the plugin process id, for diagnostics.
func (c *Client) Pid() int {
	return c.pid
}

// Exited reports whether the plugin process has exited.
func (c *Client) Exited() bool {
	return c.plugin.Exited()
}

// pluginEnv is the host environment minus our own plugin variables (a host
// that was itself started as a plugin must not pass its parent's pid on),
// plus the host pid for the plugin's watchdog. Providers such as Docker or
// Daytona need the operator's environment (DOCKER_HOST, API keys), so it is
// inherited; the local provider builds a clean one for the runner.
func pluginEnv(environ []string, hostPID int) []string {
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if strings.HasPrefix(kv, envParentPID+"=") || strings.HasPrefix(kv, envLogLevel+"=") ||
			strings.HasPrefix(kv, Handshake.MagicCookieKey+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, envParentPID+"="+strconv.Itoa(hostPID))
}

// grpcClient implements Provider over the Base and Provider services.
type grpcClient struct {
	base providerpb.BaseClient
	rpc  providerpb.ProviderClient
}

func (c *grpcClient) Info(ctx context.Context) (Info, error) {
	resp, err := c.base.Info(ctx, &providerpb.InfoRequest{})
	if err != nil {
		return Info{}, fromStatus(ctx, "Info", err)
	}
	return Info{
		Name:         resp.GetName(),
		Version:      resp.GetVersion(),
		Capabilities: resp.GetCapabilities(),
		ConfigSchema: resp.GetConfigSchema(),
	}, nil
}

func configToPB(cfg Config) *providerpb.Config {
	return &providerpb.Config{StateDir: cfg.StateDir, Options: cfg.Options}
}

func (c *grpcClient) ValidateConfig(ctx context.Context, cfg Config) error {
	_, err := c.base.ValidateConfig(ctx, &providerpb.ValidateConfigRequest{Config: configToPB(cfg)})
	return fromStatus(ctx, "ValidateConfig", err)
}

func (c *grpcClient) Configure(ctx context.Context, cfg Config) error {
	_, err := c.base.Configure(ctx, &providerpb.ConfigureRequest{Config: configToPB(cfg)})
	return fromStatus(ctx, "Configure", err)
}

func (c *grpcClient) Create(ctx context.Context, req CreateRequest) (Allocation, error) {
	resp, err := c.rpc.Create(ctx, &providerpb.CreateRequest{
		WorkspaceId:   req.WorkspaceID,
		AllocationId:  req.AllocationID,
		ControllerUrl: req.ControllerURL,
		RunnerToken:   req.RunnerToken,
		RunnerBinary:  req.RunnerBinary,
		Env:           req.Env,
		Resources: &providerpb.Resources{
			Cpus:      req.Resources.CPUs,
			MemoryMib: req.Resources.MemoryMiB,
			Pids:      req.Resources.Pids,
		},
		Labels:           req.Labels,
		Options:          req.Options,
		ControllerSocket: req.ControllerSocket,
	})
	if err != nil {
		return Allocation{}, fromStatus(ctx, "Create", err)
	}
	a := resp.GetAllocation()
	if a == nil {
		return Allocation{}, Errorf(CodeProviderFailed, "provider Create: empty allocation in response")
	}
	return Allocation{ID: a.GetId(), Root: a.GetRoot(), Info: a.GetInfo()}, nil
}

func (c *grpcClient) Inspect(ctx context.Context, allocationID string) (Status, error) {
	resp, err := c.rpc.Inspect(ctx, &providerpb.InspectRequest{AllocationId: allocationID})
	if err != nil {
		return Status{}, fromStatus(ctx, "Inspect", err)
	}
	st := State(resp.GetState())
	switch st {
	case StateCreating, StateRunning, StateStopped, StateArchived, StateGone:
	default:
		return Status{}, Errorf(CodeProviderFailed, "provider Inspect: unknown state %q", st)
	}
	return Status{State: st, Reason: resp.GetReason()}, nil
}

func (c *grpcClient) Start(ctx context.Context, req StartRequest) error {
	_, err := c.rpc.Start(ctx, &providerpb.StartRequest{
		AllocationId:  req.AllocationID,
		RunnerToken:   req.RunnerToken,
		ControllerUrl: req.ControllerURL,
	})
	return fromStatus(ctx, "Start", err)
}

func (c *grpcClient) Stop(ctx context.Context, allocationID string) error {
	_, err := c.rpc.Stop(ctx, &providerpb.StopRequest{AllocationId: allocationID})
	return fromStatus(ctx, "Stop", err)
}

func (c *grpcClient) Archive(ctx context.Context, allocationID string) error {
	_, err := c.rpc.Archive(ctx, &providerpb.ArchiveRequest{AllocationId: allocationID})
	return fromStatus(ctx, "Archive", err)
}

func (c *grpcClient) Destroy(ctx context.Context, allocationID string) error {
	_, err := c.rpc.Destroy(ctx, &providerpb.DestroyRequest{AllocationId: allocationID})
	return fromStatus(ctx, "Destroy", err)
}

func (c *grpcClient) Endpoint(ctx context.Context, allocationID string, port int) (Endpoint, error) {
	if port < 1 || port > 65535 {
		return Endpoint{}, Errorf(CodeInvalidArgument, "port %d is out of range 1-65535", port)
	}
	resp, err := c.rpc.Endpoint(ctx, &providerpb.EndpointRequest{AllocationId: allocationID, Port: int32(port)})
	if err != nil {
		return Endpoint{}, fromStatus(ctx, "Endpoint", err)
	}
	return Endpoint{URL: resp.GetUrl(), Headers: resp.GetHeaders()}, nil
}

func (c *grpcClient) InstallRunner(ctx context.Context, allocationID, runnerBinary string) error {
	_, err := c.rpc.InstallRunner(ctx, &providerpb.InstallRunnerRequest{AllocationId: allocationID, RunnerBinary: runnerBinary})
	return fromStatus(ctx, "InstallRunner", err)
}

func (c *grpcClient) ExportFiles(ctx context.Context, req ExportRequest) (ExportResult, error) {
	resp, err := c.rpc.ExportFiles(ctx, &providerpb.ExportFilesRequest{
		AllocationId: req.AllocationID,
		Dest:         req.Dest,
		MaxBytes:     req.MaxBytes,
	})
	if err != nil {
		return ExportResult{}, fromStatus(ctx, "ExportFiles", err)
	}
	return ExportResult{Files: int(resp.GetFiles()), Bytes: resp.GetBytes(), Skipped: resp.GetSkipped()}, nil
}
