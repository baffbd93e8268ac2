package daytona

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// Inspect maps the sandbox's Daytona state.
func (p *Provider) Inspect(ctx context.Context, allocationID string) (provider.Status, error) {
	_, sb, err := p.owned(ctx, allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return provider.Status{State: provider.StateGone, Reason: "no sandbox"}, nil
	}
	if err != nil {
		return provider.Status{}, err
	}
	reason := "sandbox " + sb.ID + " " + sb.State
	if sb.ErrorReason != "" {
		reason += ": " + sb.ErrorReason
	}
	switch sb.State {
	case StateStarted:
		return provider.Status{State: provider.StateRunning, Reason: reason}, nil
	case StateStopped, StateStopping, StateError, "build_failed":
		return provider.Status{State: provider.StateStopped, Reason: reason}, nil
	case StateArchived, StateArchiving:
		return provider.Status{State: provider.StateArchived, Reason: reason}, nil
	}
	return provider.Status{State: provider.StateCreating, Reason: reason}, nil
}

// Start starts a stopped (or archived) sandbox and the runner in it, with
// the fresh token; a runner staged by InstallRunner is uploaded first.
func (p *Provider) Start(ctx context.Context, req provider.StartRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, req.AllocationID)
	if err != nil {
		return err
	}
	_, cfg, _ := p.configured()
	switch sb.State {
	case StateStarted, StateStarting, StateCreating, StateRestoring:
		return provider.Errorf(provider.CodeConflict, "allocation %s is %s", req.AllocationID, sb.State)
	}
	if err := cli.Start(ctx, sb.ID); err != nil {
		return typed("start sandbox "+sb.ID, err)
	}
	if _, err := waitStarted(ctx, cli, sb.ID, startTimeout(cfg)); err != nil {
		return err
	}
	staged, err := p.staged(req.AllocationID)
	if err != nil {
		return err
	}
	url := req.ControllerURL
	if url == "" {
		url = sb.Labels[labelURL]
	}
	_, err = p.launch(ctx, cli, sb.ID, staged, runEnv{url: url, token: req.RunnerToken, alloc: req.AllocationID, ws: sb.Labels[provider.LabelWorkspace]})
	if err == nil && staged != "" {
		_ = os.Remove(p.stagePath(req.AllocationID))
	}
	return err
}

// Stop is stop-and-retain. It disables auto-delete, then a fresh read must
// show that (else CodeRetentionUnconfirmed, and the sandbox is left as it
// is: stopping it could start its deletion clock). An archived sandbox is
// stopped already (Daytona refuses Stop on it); a started one, including
// one that resumed since it was last seen, is stopped. This path never
// starts or deletes the sandbox.
func (p *Provider) Stop(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, allocationID)
	if err != nil {
		return err
	}
	_, cfg, _ := p.configured()
	if err := cli.SetAutoDelete(ctx, sb.ID, AutoDeleteDisabled); err != nil {
		return typed("disable auto-delete of "+sb.ID, err)
	}
	fresh, err := cli.Get(ctx, sb.ID)
	if err != nil {
		return typed("re-read sandbox "+sb.ID, err)
	}
	if !owns(fresh, allocationID) {
		return provider.Errorf(provider.CodeForeign, "sandbox %s no longer carries allocation %s's labels", sb.ID, allocationID)
	}
	if fresh.AutoDeleteInterval == nil || *fresh.AutoDeleteInterval != AutoDeleteDisabled {
		got := "unset"
		if fresh.AutoDeleteInterval != nil {
			got = strconv.Itoa(*fresh.AutoDeleteInterval)
		}
		return provider.Errorf(CodeRetentionUnconfirmed,
			"sandbox %s: auto-delete still %s after disabling it; not stopping a sandbox Daytona may delete", sb.ID, got)
	}
	switch fresh.State {
	case StateArchived, StateArchiving, StateStopped:
		return nil
	case StateDestroyed, StateDestroying:
		return provider.Errorf(provider.CodeNotFound, "allocation %s's sandbox is %s", allocationID, fresh.State)
	case StateError, "build_failed":
		return provider.Errorf(provider.CodeFailedPrecondition, "sandbox %s is in state %s: %s", sb.ID, fresh.State, fresh.ErrorReason)
	case StateStopping:
	default:
		if err := cli.Stop(ctx, sb.ID); err != nil {
			return typed("stop sandbox "+sb.ID, err)
		}
	}
	return waitStopped(ctx, cli, sb.ID, startTimeout(cfg))
}

// waitStopped polls until the sandbox is stopped (or archived).
func waitStopped(ctx context.Context, cli *Client, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		sb, err := cli.Get(ctx, id)
		if err != nil {
			return typed("get sandbox "+id, err)
		}
		switch sb.State {
		case StateStopped, StateArchived, StateArchiving:
			return nil
		case StateError, StateDestroyed, StateDestroying:
			return provider.Errorf(provider.CodeProviderFailed, "sandbox %s is %s while stopping: %s", id, sb.State, sb.ErrorReason)
		}
		if time.Now().After(deadline) {
			return provider.Errorf(provider.CodeProviderFailed, "sandbox %s did not stop within %s (state %s)", id, timeout, sb.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Archive moves a stopped sandbox to Daytona's object storage; Start
// restores it.
func (p *Provider) Archive(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, allocationID)
	if err != nil {
		return err
	}
	switch sb.State {
	case StateArchived, StateArchiving:
		return nil
	case StateStopped:
		return typed("archive sandbox "+sb.ID, cli.Archive(ctx, sb.ID))
	}
	return provider.Errorf(provider.CodeFailedPrecondition, "sandbox %s is %s; stop it before archiving", sb.ID, sb.State)
}

// Destroy deletes the sandbox. An allocation without one is not an error.
func (p *Provider) Destroy(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if err := cli.Delete(ctx, sb.ID); err != nil && statusOf(err) != http.StatusNotFound {
		return typed("delete sandbox "+sb.ID, err)
	}
	_ = os.Remove(p.stagePath(allocationID))
	return nil
}

// Endpoint is the port's Daytona preview link, with its token header.
func (p *Provider) Endpoint(ctx context.Context, allocationID string, port int) (provider.Endpoint, error) {
	cli, sb, err := p.owned(ctx, allocationID)
	if err != nil {
		return provider.Endpoint{}, err
	}
	if port < 1 || port > 65535 {
		return provider.Endpoint{}, provider.Errorf(provider.CodeInvalidArgument, "port %d is out of range 1-65535", port)
	}
	pv, err := cli.PreviewURL(ctx, sb.ID, port)
	if err != nil {
		return provider.Endpoint{}, typed("preview link of "+sb.ID, err)
	}
	ep := provider.Endpoint{URL: pv.URL}
	if pv.Token != "" {
		ep.Headers = map[string]string{PreviewTokenHeader: pv.Token}
	}
	return ep, nil
}

// InstallRunner uploads the runner through the toolbox file API when the
// sandbox is started. Daytona's toolbox only serves started sandboxes, and
// starting one here would break stop-and-retain, so for a stopped sandbox
// the binary's path is staged in the state dir and the next Start uploads it.
func (p *Provider) InstallRunner(ctx context.Context, allocationID, runnerBinary string) error {
	if err := provider.CheckRunnerBinary(runnerBinary); err != nil {
		return err
	}
	unlock := p.lock(allocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, allocationID)
	if err != nil {
		return err
	}
	if sb.State == StateStarted {
		dir, err := cli.ProjectDir(ctx, sb.ID)
		if err != nil {
			return typed("project dir of "+sb.ID, err)
		}
		if err := cli.Upload(ctx, sb.ID, path.Join(dir, runnerSub), runnerBinary); err != nil {
			return typed("upload runner to "+sb.ID, err)
		}
		_ = os.Remove(p.stagePath(allocationID))
		return nil
	}
	sp := p.stagePath(allocationID)
	if sp == "" {
		return provider.Errorf(provider.CodeFailedPrecondition, "sandbox %s is %s and the provider has no state dir to stage the runner in", sb.ID, sb.State)
	}
	if err := os.MkdirAll(filepath.Dir(sp), 0o700); err != nil {
		return err
	}
	tmp := sp + ".tmp"
	if err := os.WriteFile(tmp, []byte(runnerBinary), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, sp)
}

// stagePath is where InstallRunner stages a runner for allocation id's next
// Start, "" without a state dir.
func (p *Provider) stagePath(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stateDir == "" || provider.CheckAllocationID(id) != nil {
		return ""
	}
	return filepath.Join(p.stateDir, "staged-runner", id)
}

// staged returns the runner binary staged for id, "" when there is none.
func (p *Provider) staged(id string) (string, error) {
	sp := p.stagePath(id)
	if sp == "" {
		return "", nil
	}
	b, err := os.ReadFile(sp)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if err := provider.CheckRunnerBinary(string(b)); err != nil {
		return "", err
	}
	return string(b), nil
}
