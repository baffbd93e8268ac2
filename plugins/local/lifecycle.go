package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/tetherhq/tether/plugins/provider"
)

// Inspect reports running while the recorded runner process lives, stopped
// when it does not (the directory and files are kept), and gone when there
// is no such allocation.
func (p *Provider) Inspect(_ context.Context, allocationID string) (provider.Status, error) {
	unlock := p.lock(allocationID)
	defer unlock()
	dir, _, err := p.owned(allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return provider.Status{State: provider.StateGone, Reason: "no such allocation"}, nil
	}
	if err != nil {
		return provider.Status{}, err
	}
	running, reason, err := runnerState(dir)
	if err != nil {
		return provider.Status{}, err
	}
	if running {
		return provider.Status{State: provider.StateRunning, Reason: reason}, nil
	}
	return provider.Status{State: provider.StateStopped, Reason: reason}, nil
}

// runnerState reads runner.pid and checks that process, by pid and start
// time, is alive.
func runnerState(dir string) (running bool, reason string, err error) {
	pid, start, err := readPidFile(filepath.Join(dir, pidFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, "the runner was never started", nil
	}
	if err != nil {
		return false, "", provider.Errorf(provider.CodeProviderFailed, "%v", err)
	}
	st, err := readProcStat(pid)
	if err != nil || st.start != start || st.zombie() {
		return false, "the runner is not running (its output is in " + filepath.Join(dir, logFileName) + ")", nil
	}
	return true, fmt.Sprintf("runner pid %d", pid), nil
}

// Start restarts the runner of a stopped allocation in its existing root,
// with a fresh bootstrap token. Whatever the previous runner left running
// in its session is stopped first.
func (p *Provider) Start(ctx context.Context, req provider.StartRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()
	dir, m, err := p.owned(req.AllocationID)
	if err != nil {
		return err
	}
	running, _, err := runnerState(dir)
	if err != nil {
		return err
	}
	if running {
		return provider.Errorf(provider.CodeConflict, "allocation %s is running", req.AllocationID)
	}
	if err := stopAllocation(ctx, dir, p.stopGrace); err != nil {
		return err
	}
	if req.ControllerURL != "" && req.ControllerURL != m.ControllerURL {
		m.ControllerURL = req.ControllerURL
		if err := writeMarker(dir, m); err != nil {
			return provider.Errorf(provider.CodeProviderFailed, "%v", err)
		}
	}
	_, err = startRunner(dir, m, req.RunnerToken)
	return err
}

// Archive is not something a directory on the host can do.
func (p *Provider) Archive(_ context.Context, allocationID string) error {
	if _, _, err := p.owned(allocationID); err != nil {
		return err
	}
	return provider.Errorf(provider.CodeUnsupported, "the local provider cannot archive allocations")
}

// Endpoint: the runner's commands listen on the host itself.
func (p *Provider) Endpoint(_ context.Context, allocationID string, port int) (provider.Endpoint, error) {
	if _, _, err := p.owned(allocationID); err != nil {
		return provider.Endpoint{}, err
	}
	if port < 1 || port > 65535 {
		return provider.Endpoint{}, provider.Errorf(provider.CodeInvalidArgument, "port %d is out of range 1-65535", port)
	}
	return provider.Endpoint{URL: fmt.Sprintf("http://127.0.0.1:%d", port)}, nil
}

// InstallRunner points the allocation at another runner binary. The
// sandbox is the host itself, so the binary is not copied (a copy per
// workspace would cost its size in disk each time): the next Start runs it
// from where it is. A running runner is not touched.
func (p *Provider) InstallRunner(_ context.Context, allocationID, runnerBinary string) error {
	if err := provider.CheckRunnerBinary(runnerBinary); err != nil {
		return err
	}
	unlock := p.lock(allocationID)
	defer unlock()
	dir, m, err := p.owned(allocationID)
	if err != nil {
		return err
	}
	m.Runner = runnerBinary
	if err := writeMarker(dir, m); err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "%v", err)
	}
	return nil
}

var _ provider.Exporter = (*Provider)(nil)

// ExportFiles is unsupported: the local provider's workspace files are reached
// through the runner, not through a provider API.
func (p *Provider) ExportFiles(context.Context, provider.ExportRequest) (provider.ExportResult, error) {
	return provider.ExportResult{}, provider.Errorf(provider.CodeUnsupported, "the local provider does not export files")
}
