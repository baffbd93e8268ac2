package daytona

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tetherhq/tether/plugins/provider"
)

// Inspect maps the sandbox's Daytona state (states.go).
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
	st, known := MapState(sb.State)
	if !known {
		reason += " (a state this provider does not know)"
	}
	return provider.Status{State: st, Reason: reason}, nil
}

// Start starts a stopped sandbox, restores an archived one (waiting
// through restoring, up to the start_timeout option) or resumes a paused
// one, then starts the runner in it with the fresh token; a runner staged
// by InstallRunner is installed first. A sandbox already on its way to
// started is waited for.
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
	case StateStarted:
		return provider.Errorf(provider.CodeConflict, "allocation %s is %s", req.AllocationID, sb.State)
	case StateStarting, StateRestoring, StateResuming, StateCreating, StatePendingBuild, StateBuildingSnapshot, StatePullingSnapshot:
	default:
		if err := cli.Start(ctx, sb.ID); err != nil {
			return typed("start sandbox "+sb.ID, err)
		}
	}
	if sb, err = waitStarted(ctx, cli, sb.ID, startTimeout(cfg)); err != nil {
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
	_, err = p.launch(ctx, cli, sb, staged, runEnv{url: url, token: req.RunnerToken, alloc: req.AllocationID, ws: sb.Labels[provider.LabelWorkspace]})
	if err == nil && staged != "" {
		_ = os.Remove(p.stagePath(req.AllocationID))
	}
	return err
}

// Stop is stop-and-retain. It disables auto-delete, then a fresh read must
// show that (else CodeRetentionUnconfirmed, and the sandbox is left as it
// is: stopping it could start its deletion clock). A started sandbox's
// runner is then ended gracefully (its sessions deleted: SIGTERM, then
// SIGKILL), since Daytona's stop SIGKILLs every process; the sandbox is
// stopped, and a fresh read must show it stopped or archived (both keep
// its files). An archived sandbox is stopped already (Daytona refuses Stop
// on it). This path never starts or deletes the sandbox.
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
	if err := confirmRetention(fresh, allocationID); err != nil {
		return err
	}
	switch {
	case retained(fresh.State), fresh.State == StateArchiving, fresh.State == StateStopping:
	case fresh.State == StateDestroyed || fresh.State == StateDestroying:
		return provider.Errorf(provider.CodeNotFound, "allocation %s's sandbox is %s", allocationID, fresh.State)
	case fresh.State == StateError || fresh.State == StateBuildFailed:
		return provider.Errorf(provider.CodeFailedPrecondition, "sandbox %s is in state %s: %s", sb.ID, fresh.State, fresh.ErrorReason)
	default:
		if fresh.State == StateStarted {
			tb, err := cli.Toolbox(ctx, fresh)
			if err != nil {
				return err
			}
			if err := endRunner(ctx, tb); err != nil {
				return err
			}
		}
		if err := cli.Stop(ctx, sb.ID); err != nil {
			return typed("stop sandbox "+sb.ID, err)
		}
	}
	if _, err := waitStopped(ctx, cli, sb.ID, stopTimeout(cfg)); err != nil {
		return err
	}
	// Retention is what a fresh read says, not what the calls answered.
	final, err := cli.Get(ctx, sb.ID)
	if err != nil {
		return typed("re-read sandbox "+sb.ID, err)
	}
	if err := confirmRetention(final, allocationID); err != nil {
		return err
	}
	if !retained(final.State) {
		return provider.Errorf(CodeRetentionUnconfirmed, "sandbox %s is %s after stopping, neither stopped nor archived", sb.ID, final.State)
	}
	return nil
}

// confirmRetention requires a fresh read of allocation id's sandbox to be
// still ours with auto-delete disabled.
func confirmRetention(sb Sandbox, id string) error {
	if !owns(sb, id) {
		return provider.Errorf(provider.CodeForeign, "sandbox %s no longer carries allocation %s's labels", sb.ID, id)
	}
	if sb.AutoDeleteInterval == nil || *sb.AutoDeleteInterval >= 0 {
		got := "unset"
		if sb.AutoDeleteInterval != nil {
			got = strconv.FormatFloat(*sb.AutoDeleteInterval, 'f', -1, 64)
		}
		return provider.Errorf(CodeRetentionUnconfirmed,
			"sandbox %s: auto-delete still %s after disabling it; not stopping a sandbox Daytona may delete", sb.ID, got)
	}
	return nil
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
	case StateStopping:
		if _, err := waitStopped(ctx, cli, sb.ID, stopTimeout(p.cfgNow())); err != nil {
			return err
		}
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
	if err := cli.Delete(ctx, sb.ID); err != nil && !notFound(err) {
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
		tb, err := cli.Toolbox(ctx, sb)
		if err != nil {
			return err
		}
		ps, err := sandboxPaths(ctx, tb)
		if err != nil {
			return err
		}
		if err := prepare(ctx, tb, ps); err != nil {
			return err
		}
		if err := installRunner(ctx, tb, ps, runnerBinary); err != nil {
			return err
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
