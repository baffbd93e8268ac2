package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// Create makes the sandbox, waits for it to start, uploads the runner and
// starts it with a session command. A failed Create deletes the sandbox it
// made: by its id, or, when the create answer was lost, by its exact labels.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Allocation, error) {
	cli, cfg, err := p.configured()
	if err != nil {
		return provider.Allocation{}, err
	}
	if err := provider.CheckAllocationID(req.AllocationID); err != nil {
		return provider.Allocation{}, err
	}
	if err := validateCreate(req); err != nil {
		return provider.Allocation{}, err
	}
	opts := options.Resolve(cfg, req.Options)
	body, err := createBody(req, opts)
	if err != nil {
		return provider.Allocation{}, err
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()

	// An allocation id in use, by us or by someone else, is refused before
	// anything is made.
	switch _, sb, err := p.owned(ctx, req.AllocationID); provider.ErrorCode(err) {
	case provider.CodeNotFound:
	case "":
		return provider.Allocation{}, provider.Errorf(provider.CodeConflict, "allocation %s already has sandbox %s (%s)", req.AllocationID, sb.ID, sb.State)
	default:
		return provider.Allocation{}, err
	}

	sb, err := cli.Create(ctx, body)
	if err != nil {
		if s := statusOf(err); s/100 == 4 {
			err = typed("create sandbox "+body.Name, err)
			if s == http.StatusConflict {
				return provider.Allocation{}, provider.Errorf(provider.CodeConflict, "a sandbox named %s already exists", body.Name)
			}
			return provider.Allocation{}, err
		}
		// The answer may be lost while the sandbox was made: find it by
		// its exact labels and remove it.
		return provider.Allocation{}, errors.Join(typed("create sandbox "+body.Name, err), p.cleanupByLabels(ctx, cli, req.AllocationID))
	}
	fail := func(err error) (provider.Allocation, error) {
		return provider.Allocation{}, errors.Join(err, p.cleanupByID(ctx, cli, sb.ID, req.AllocationID))
	}
	if !owns(sb, req.AllocationID) {
		return fail(provider.Errorf(provider.CodeProviderFailed, "Daytona answered the create of %s with a sandbox without its labels", body.Name))
	}
	if sb, err = waitStarted(ctx, cli, sb.ID, startTimeout(opts)); err != nil {
		return fail(err)
	}
	root, err := p.launch(ctx, cli, sb.ID, req.RunnerBinary, runEnv{
		url: req.ControllerURL, token: req.RunnerToken, alloc: req.AllocationID, ws: req.WorkspaceID, extra: req.Env,
	})
	if err != nil {
		return fail(err)
	}
	info := map[string]string{"sandbox": sb.ID, "name": sb.Name, "state": sb.State}
	if sb.Target != "" {
		info["target"] = sb.Target
	}
	if sb.Snapshot != "" {
		info["snapshot"] = sb.Snapshot
	}
	return provider.Allocation{ID: req.AllocationID, Root: root, Info: info}, nil
}

func createBody(req provider.CreateRequest, opts map[string]string) (CreateSandbox, error) {
	life, err := intervals(opts)
	if err != nil {
		return CreateSandbox{}, err
	}
	r := req.Resources
	if r.CPUs < 0 || r.MemoryMiB < 0 || r.Pids < 0 {
		return CreateSandbox{}, provider.Errorf(provider.CodeInvalidArgument, "resources must not be negative: %+v", r)
	}
	labels := make(map[string]string, len(req.Labels)+4)
	for k, v := range req.Labels {
		labels[k] = v
	}
	labels[provider.LabelWorkspace] = req.WorkspaceID
	labels[provider.LabelAllocation] = req.AllocationID
	labels[labelOwn] = Name
	labels[labelURL] = req.ControllerURL
	body := CreateSandbox{
		Name: sandboxName(req.AllocationID), Snapshot: opts["snapshot"], Target: opts["target"], Labels: labels,
		AutoStopInterval: life.stop, AutoArchiveInterval: life.archive, AutoDeleteInterval: life.delete,
	}
	body.CPU = int(math.Ceil(r.CPUs))
	if body.CPU == 0 {
		body.CPU, _ = strconv.Atoi(opts["cpus"])
	}
	body.Memory = int((r.MemoryMiB + 1023) / 1024)
	if body.Memory == 0 {
		body.Memory, _ = strconv.Atoi(opts["memory_gib"])
	}
	body.Disk, _ = strconv.Atoi(opts["disk_gib"])
	return body, nil
}

// waitStarted polls the sandbox until it is started.
func waitStarted(ctx context.Context, cli *Client, id string, timeout time.Duration) (Sandbox, error) {
	deadline := time.Now().Add(timeout)
	for {
		sb, err := cli.Get(ctx, id)
		if err != nil {
			return sb, typed("get sandbox "+id, err)
		}
		switch sb.State {
		case StateStarted:
			return sb, nil
		case StateError, "build_failed", StateDestroyed, StateDestroying:
			return sb, provider.Errorf(provider.CodeProviderFailed, "sandbox %s is %s: %s", id, sb.State, sb.ErrorReason)
		}
		if time.Now().After(deadline) {
			return sb, provider.Errorf(provider.CodeProviderFailed, "sandbox %s did not start within %s (state %s)", id, timeout, sb.State)
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runEnv is what the runner is started with.
type runEnv struct {
	url, token, alloc, ws string
	extra                 map[string]string
}

// launch uploads runnerBinary when it is set, then starts the runner in a
// new session and returns the workspace root. The token is in the session
// command's environment only: not in the sandbox's env, labels or files.
func (p *Provider) launch(ctx context.Context, cli *Client, sandboxID, runnerBinary string, e runEnv) (string, error) {
	dir, err := cli.ProjectDir(ctx, sandboxID)
	if err != nil {
		return "", typed("project dir of "+sandboxID, err)
	}
	if !path.IsAbs(dir) {
		return "", provider.Errorf(provider.CodeProviderFailed, "sandbox %s reports project dir %q, not an absolute path", sandboxID, dir)
	}
	root, runner := path.Join(dir, workspaceSub), path.Join(dir, runnerSub)
	if runnerBinary != "" {
		if err := cli.Upload(ctx, sandboxID, runner, runnerBinary); err != nil {
			return "", typed("upload runner to "+sandboxID, err)
		}
	}
	env := map[string]string{
		provider.EnvControllerURL: e.url, provider.EnvRunnerToken: e.token, provider.EnvAllocationID: e.alloc,
		provider.EnvWorkspaceID: e.ws, provider.EnvWorkspaceRoot: root,
	}
	for k, v := range e.extra {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	script := "mkdir -p " + q(root) + " && chmod 755 " + q(runner) + " && cd " + q(root) + " || exit 97\n"
	for _, k := range keys {
		script += "export " + k + "=" + q(env[k]) + "\n"
	}
	script += "exec " + q(runner) + " >>" + q(path.Join(dir, ".tether/runner.log")) + " 2>&1\n"
	session := "tether-runner-" + randHex()
	if err := cli.CreateSession(ctx, sandboxID, session); err != nil {
		return "", typed("create session in "+sandboxID, err)
	}
	// A child shell runs the script, so its exec replaces that shell and
	// not the session's own.
	if _, err := cli.ExecAsync(ctx, sandboxID, session, "sh -c "+q(script)); err != nil {
		return "", typed("start runner in "+sandboxID, err)
	}
	return root, nil
}

// cleanupByID deletes the sandbox a failed Create made, by its exact id.
func (p *Provider) cleanupByID(ctx context.Context, cli *Client, sandboxID, alloc string) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := cli.Delete(c, sandboxID); err != nil && statusOf(err) != http.StatusNotFound {
		return provider.Errorf(provider.CodeProviderFailed, "cleanup of allocation %s: delete sandbox %s: %v", alloc, sandboxID, err)
	}
	return nil
}

// cleanupByLabels finds the sandboxes carrying exactly this provider's
// labels for alloc (checked here, not trusted to the filter) and deletes
// each by its id.
func (p *Provider) cleanupByLabels(ctx context.Context, cli *Client, alloc string) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	list, err := cli.List(c, map[string]string{labelOwn: Name, provider.LabelAllocation: alloc})
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "cleanup of allocation %s: list sandboxes: %v", alloc, err)
	}
	var errs []error
	for _, sb := range list {
		if owns(sb, alloc) {
			errs = append(errs, p.cleanupByID(c, cli, sb.ID, alloc))
		}
	}
	return errors.Join(errs...)
}

func validateCreate(req provider.CreateRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	if err := options.Check(req.Options); err != nil {
		return err
	}
	for k := range req.Options {
		if configOnly[k] {
			return provider.Errorf(provider.CodeInvalidArgument, "option %s can only be set in the provider's configuration", k)
		}
	}
	// Variables go into a shell script here, so names must also be shell names.
	for k := range req.Env {
		if !envName(k) {
			return provider.Errorf(provider.CodeInvalidArgument, "invalid environment variable %q", k)
		}
	}
	return nil
}

// envName accepts names a shell can export.
func envName(k string) bool {
	for i, r := range k {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// q single-quotes s for sh.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func randHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
