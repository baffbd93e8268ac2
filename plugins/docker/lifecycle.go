package docker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/plugins/provider"
)

// owned inspects allocation id's container and checks it is one this
// provider made for that allocation: CodeNotFound (with the client) when there is none,
// CodeForeign when the name is taken by a container without our labels.
func (p *Provider) owned(ctx context.Context, id string) (*client.Client, container.InspectResponse, error) {
	cli, _, err := p.configured()
	if err != nil {
		return nil, container.InspectResponse{}, err
	}
	if err := provider.CheckAllocationID(id); err != nil {
		return nil, container.InspectResponse{}, err
	}
	name := containerName(id)
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		err = typed("inspect "+name, err)
		if provider.ErrorCode(err) == provider.CodeNotFound {
			// The client comes along: Destroy still removes the allocation's network.
			return cli, container.InspectResponse{}, provider.Errorf(provider.CodeNotFound, "allocation %s has no container", id)
		}
		return nil, container.InspectResponse{}, err
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if labels[labelOwn] != Name || labels[provider.LabelAllocation] != id || c.State == nil {
		return nil, container.InspectResponse{}, provider.Errorf(provider.CodeForeign,
			"container %s was not made by tether's docker provider for allocation %s; refusing to touch it", name, id)
	}
	return cli, c, nil
}

// Inspect maps the container's state: created → creating, running (or
// restarting, paused) → running, exited/dead → stopped, none → gone.
func (p *Provider) Inspect(ctx context.Context, allocationID string) (provider.Status, error) {
	_, c, err := p.owned(ctx, allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return provider.Status{State: provider.StateGone, Reason: "no container"}, nil
	}
	if err != nil {
		return provider.Status{}, err
	}
	st := c.State
	switch st.Status {
	case container.StateCreated:
		return provider.Status{State: provider.StateCreating, Reason: "container created, not started"}, nil
	case container.StateRunning, container.StateRestarting:
		return provider.Status{State: provider.StateRunning, Reason: "container " + shortID(c.ID) + " running"}, nil
	case container.StatePaused:
		return provider.Status{State: provider.StateRunning, Reason: "container " + shortID(c.ID) + " is paused"}, nil
	case container.StateRemoving:
		return provider.Status{State: provider.StateGone, Reason: "container is being removed"}, nil
	}
	reason := fmt.Sprintf("container %s exited with code %d", shortID(c.ID), st.ExitCode)
	if st.OOMKilled {
		reason += " (out of memory)"
	}
	if st.Error != "" {
		reason += ": " + st.Error
	}
	return provider.Status{State: provider.StateStopped, Reason: reason}, nil
}

// Start resumes a stopped container. The runner restarts with the fresh
// token, written to the boot environment file before the start.
func (p *Provider) Start(ctx context.Context, req provider.StartRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()
	cli, c, err := p.owned(ctx, req.AllocationID)
	if err != nil {
		return err
	}
	if c.State.Running || c.State.Restarting || c.State.Paused {
		return provider.Errorf(provider.CodeConflict, "allocation %s is running", req.AllocationID)
	}
	// A runner on the provider's own network dials the controller's socket, mounted at create,
	// whatever URL the controller has now.
	url := c.Config.Labels[labelRunnerURL]
	if url == "" {
		url = req.ControllerURL
	}
	if url == "" {
		url = c.Config.Labels[labelURL]
	}
	env := tarFile{name: strings.TrimPrefix(bootEnv, "/"), mode: 0o600, data: bootEnvFile(url, req.RunnerToken)}
	if err := copyIn(ctx, cli, c.ID, []tarFile{env}); err != nil {
		return err
	}
	_, err = cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{})
	return typed("start container "+c.Name, err)
}

// Stop stops the container (SIGTERM to the runner through the init
// process, SIGKILL after stop_timeout) and keeps it, files included.
func (p *Provider) Stop(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	cli, c, err := p.owned(ctx, allocationID)
	if err != nil {
		return err
	}
	if !c.State.Running && !c.State.Restarting && !c.State.Paused {
		return nil
	}
	_, err = cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{})
	return typed("stop container "+c.Name, err)
}

// Archive: a stopped container is as cheap as Docker makes it.
func (p *Provider) Archive(ctx context.Context, allocationID string) error {
	if _, _, err := p.owned(ctx, allocationID); err != nil {
		return err
	}
	return provider.Errorf(provider.CodeUnsupported, "the docker provider cannot archive allocations")
}

// Destroy removes the container (killing it if it runs), its anonymous
// volumes and the allocation's own network. An allocation without a
// container is not an error; a network left by a Create or Destroy that was
// cut short goes too.
func (p *Provider) Destroy(ctx context.Context, allocationID string) error {
	unlock := p.lock(allocationID)
	defer unlock()
	cli, c, err := p.owned(ctx, allocationID)
	if provider.ErrorCode(err) == provider.CodeNotFound {
		return removeOwnedNetworks(ctx, cli, allocationID)
	}
	if err != nil {
		return err
	}
	_, err = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err = typed("remove container "+c.Name, err); err != nil && provider.ErrorCode(err) != provider.CodeNotFound {
		return err
	}
	return removeOwnedNetworks(ctx, cli, allocationID)
}

// Endpoint: on the host network a port is the host's; on another network it
// is the container's address there.
func (p *Provider) Endpoint(ctx context.Context, allocationID string, port int) (provider.Endpoint, error) {
	_, c, err := p.owned(ctx, allocationID)
	if err != nil {
		return provider.Endpoint{}, err
	}
	if port < 1 || port > 65535 {
		return provider.Endpoint{}, provider.Errorf(provider.CodeInvalidArgument, "port %d is out of range 1-65535", port)
	}
	mode := ""
	if c.HostConfig != nil {
		mode = string(c.HostConfig.NetworkMode)
	}
	if mode == "host" {
		return provider.Endpoint{URL: "http://127.0.0.1:" + strconv.Itoa(port)}, nil
	}
	if c.NetworkSettings != nil {
		if ep, ok := c.NetworkSettings.Networks[mode]; ok && ep != nil && ep.IPAddress.IsValid() {
			return provider.Endpoint{URL: "http://" + ep.IPAddress.String() + ":" + strconv.Itoa(port)}, nil
		}
	}
	return provider.Endpoint{}, provider.Errorf(provider.CodeFailedPrecondition,
		"container %s has no address on network %q (is it running?)", c.Name, mode)
}

// InstallRunner copies the runner binary into the container, replacing
// /tether-runner; the next Start runs it.
func (p *Provider) InstallRunner(ctx context.Context, allocationID, runnerBinary string) error {
	if err := provider.CheckRunnerBinary(runnerBinary); err != nil {
		return err
	}
	unlock := p.lock(allocationID)
	defer unlock()
	cli, c, err := p.owned(ctx, allocationID)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(runnerBinary)
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "read runner: %v", err)
	}
	return copyIn(ctx, cli, c.ID, []tarFile{{name: strings.TrimPrefix(runnerPath, "/"), mode: 0o755, data: data}})
}

var _ provider.Exporter = (*Provider)(nil)

// ExportFiles is unsupported: the docker provider's workspace files are reached
// through the runner, not through a provider API.
func (p *Provider) ExportFiles(context.Context, provider.ExportRequest) (provider.ExportResult, error) {
	return provider.ExportResult{}, provider.Errorf(provider.CodeUnsupported, "the docker provider does not export files")
}
