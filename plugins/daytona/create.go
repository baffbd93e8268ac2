package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
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
		err = typed("create sandbox "+body.Name, err)
		if provider.ErrorCode(err) == provider.CodeConflict {
			// The name is taken: by a sandbox the check above did not see,
			// so not ours to clean up.
			return provider.Allocation{}, provider.Errorf(provider.CodeConflict, "a sandbox named %s already exists", body.Name)
		}
		// A failed answer does not mean nothing was made: Daytona writes
		// the sandbox first and may answer 4xx after (a build that failed,
		// a lost answer). Find it by name and labels and remove it.
		return provider.Allocation{}, errors.Join(err, p.cleanupLost(ctx, cli, req.AllocationID))
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
	root, err := p.launch(ctx, cli, sb, req.RunnerBinary, runEnv{
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
	if err := checkSource(opts, r); err != nil {
		return CreateSandbox{}, err
	}
	if opts["image"] == "" {
		// Resources come from the snapshot (Daytona refuses them with one).
		return body, nil
	}
	body.BuildInfo = &BuildInfo{DockerfileContent: "FROM " + opts["image"] + "\n"}
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

// cleanupByID deletes the sandbox a failed Create made, by its exact id,
// waiting out a pending state change (409).
func (p *Provider) cleanupByID(ctx context.Context, cli *Client, sandboxID, alloc string) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if err := cli.Delete(c, sandboxID); err != nil && !notFound(err) {
		return provider.Errorf(provider.CodeProviderFailed, "cleanup of allocation %s: delete sandbox %s: %v", alloc, sandboxID, err)
	}
	return nil
}

// cleanupLost finds what a create whose answer failed may have made and
// deletes it: the sandbox under the allocation's name (a consistent read),
// and every sandbox the list shows with exactly this provider's labels for
// alloc (checked here, not trusted to the filter; the list is eventually
// consistent, which is why the name is read too). Each is deleted by id.
func (p *Provider) cleanupLost(ctx context.Context, cli *Client, alloc string) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	ids := map[string]bool{}
	var errs []error
	switch sb, err := cli.Get(c, sandboxName(alloc)); {
	case err == nil && owns(sb, alloc):
		ids[sb.ID] = true
	case err != nil && !notFound(err):
		errs = append(errs, provider.Errorf(provider.CodeProviderFailed, "cleanup of allocation %s: get sandbox %s: %v", alloc, sandboxName(alloc), err))
	}
	list, err := cli.List(c, map[string]string{labelOwn: Name, provider.LabelAllocation: alloc})
	if err != nil {
		errs = append(errs, provider.Errorf(provider.CodeProviderFailed, "cleanup of allocation %s: list sandboxes: %v", alloc, err))
	}
	for _, sb := range list {
		if owns(sb, alloc) {
			ids[sb.ID] = true
		}
	}
	for id := range ids {
		errs = append(errs, p.cleanupByID(c, cli, id, alloc))
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
