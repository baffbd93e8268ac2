package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/plugins/provider"
)

// Create makes the container (not pulling its image), copies the runner,
// the workspace root and the boot environment in, and starts it. A failed
// Create removes the container it made.
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
	if err := checkOptions(opts); err != nil {
		return provider.Allocation{}, err
	}
	lim, err := limitsFrom(opts, req.Resources)
	if err != nil {
		return provider.Allocation{}, err
	}
	mode := opts["network"]
	runnerURL, err := p.runnerURL(cli, mode, req)
	if err != nil {
		return provider.Allocation{}, err
	}
	uid, gid := parseUser(opts["user"])
	unlock := p.lock(req.AllocationID)
	defer unlock()
	lim = p.fitCPUs(ctx, cli, lim, req.Resources, opts)

	image := opts["image"]
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		if err := typed("image "+image, err); provider.ErrorCode(err) == provider.CodeNotFound {
			return provider.Allocation{}, provider.Errorf(provider.CodeNotFound,
				"image %s is not on this Docker host; tether never pulls: build it (make image) or load it", image)
		}
		return provider.Allocation{}, typed("image "+image, err)
	}
	runner, err := os.ReadFile(req.RunnerBinary)
	if err != nil {
		return provider.Allocation{}, provider.Errorf(provider.CodeProviderFailed, "read runner: %v", err)
	}

	name := containerName(req.AllocationID)
	network := mode
	var networkID string
	if ownNetwork(mode) {
		if networkID, err = createNetwork(ctx, cli, mode, req); err != nil {
			return provider.Allocation{}, err
		}
		network = networkName(req.AllocationID)
	}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     containerConfig(req, opts, runnerURL),
		HostConfig: hostConfig(opts, lim, network, req.ControllerSocket, runnerURL),
	})
	if err != nil {
		if networkID != "" {
			removeNetwork(ctx, cli, networkID)
		}
		err = typed("create container "+name, err)
		if provider.ErrorCode(err) == provider.CodeConflict {
			return provider.Allocation{}, provider.Errorf(provider.CodeConflict, "a container named %s already exists", name)
		}
		return provider.Allocation{}, err
	}
	fail := func(err error) (provider.Allocation, error) {
		// Nothing was handed out yet; leave no container and no network behind.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = cli.ContainerRemove(rmCtx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if networkID != "" {
			removeNetwork(rmCtx, cli, networkID)
		}
		return provider.Allocation{}, err
	}
	// The workspace is the agent's; the rest is the runner's (root) and closed to the agent:
	// the boot environment with the token, /run/tether above the controller's socket.
	files := []tarFile{
		{name: "workspace/", mode: 0o755, uid: uid, gid: gid, dir: true},
		{name: ".tether/", mode: 0o700, dir: true},
		{name: ".tether/env", mode: 0o600, data: bootEnvFile(runnerURL, req.RunnerToken)},
		{name: strings.TrimPrefix(runDir, "/") + "/", mode: 0o700, dir: true},
		{name: strings.TrimPrefix(runnerPath, "/"), mode: 0o755, data: runner},
	}
	if err := copyIn(ctx, cli, created.ID, files); err != nil {
		return fail(err)
	}
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fail(typed("start container "+name, err))
	}
	info := map[string]string{
		"container":       shortID(created.ID),
		"name":            name,
		"image":           image,
		"network":         mode,
		"isolation":       provider.IsolationUID,
		"agent_user":      opts["user"],
		"cpus":            limitText(float64(lim.nanoCPUs)/1e9, lim.nanoCPUs),
		"memory":          limitText(float64(lim.memory>>20), lim.memory) + mib(lim.memory),
		"pids":            limitText(float64(lim.pids), lim.pids),
		"runner_connects": connectsText(runnerURL),
	}
	if network != mode {
		info["docker_network"] = network
	}
	return provider.Allocation{ID: req.AllocationID, Root: workspaceDir, Info: info}, nil
}

// limitText shows a limit, "none" for none.
func limitText(v float64, raw int64) string {
	if raw <= 0 {
		return "none"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func mib(bytes int64) string {
	if bytes <= 0 {
		return ""
	}
	return " MiB"
}

// connectsText says how the runner reaches the controller.
func connectsText(runnerURL string) string {
	if strings.HasPrefix(runnerURL, "unix://") {
		return "through the controller's runner socket (" + runnerURL + ")"
	}
	return runnerURL
}

// runnerURL is the URL the runner of a new allocation dials. On the provider's own networks
// it is the controller's runner socket, mounted into the container: the network has no route
// to a controller on the host's loopback. That needs a socket, and a Docker Engine on this
// machine (a bind mount names a path on the daemon's host); without them a controller URL the
// network can reach will do.
func (p *Provider) runnerURL(cli *client.Client, mode string, req provider.CreateRequest) (string, error) {
	if !ownNetwork(mode) {
		return req.ControllerURL, checkReachable(mode, req.ControllerURL)
	}
	if req.ControllerSocket != "" && strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return runnerURLFor(req.ControllerSocket), nil
	}
	if err := checkReachable(mode, req.ControllerURL); err != nil {
		why := "the controller offers no runner socket"
		if req.ControllerSocket != "" {
			why = "the Docker Engine at " + cli.DaemonHost() + " is not on this machine, so the controller's runner socket cannot be mounted"
		}
		return "", provider.Errorf(provider.CodeInvalidArgument, "network %s: %s, and %v", mode, why, err)
	}
	return req.ControllerURL, nil
}

// containerConfig: the container starts as its root, which is the runner's; the runner starts
// the agent's commands as the user option's uid:gid (TETHER_ISOLATION=uid).
func containerConfig(req provider.CreateRequest, opts map[string]string, runnerURL string) *container.Config {
	uid, gid := parseUser(opts["user"])
	env := []string{
		provider.EnvWorkspaceRoot + "=" + workspaceDir,
		provider.EnvAllocationID + "=" + req.AllocationID,
		provider.EnvWorkspaceID + "=" + req.WorkspaceID,
		provider.EnvIsolation + "=" + provider.IsolationUID,
		provider.EnvAgentUID + "=" + strconv.Itoa(uid),
		provider.EnvAgentGID + "=" + strconv.Itoa(gid),
		// The container is the sandbox's cgroup, and its own (a private cgroup namespace).
		provider.EnvUsageSource + "=cgroup",
	}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	labels := make(map[string]string, len(req.Labels)+4)
	for k, v := range req.Labels {
		labels[k] = v
	}
	labels[provider.LabelWorkspace] = req.WorkspaceID
	labels[provider.LabelAllocation] = req.AllocationID
	labels[labelOwn] = Name
	labels[labelURL] = req.ControllerURL
	labels[labelNetworkMode] = opts["network"]
	if strings.HasPrefix(runnerURL, "unix://") {
		labels[labelRunnerURL] = runnerURL
	}
	timeout, _ := strconv.Atoi(opts["stop_timeout"])
	return &container.Config{
		Image:       opts["image"],
		User:        runnerUser,
		WorkingDir:  workspaceDir,
		Entrypoint:  []string{"/bin/sh", "-c", bootScript},
		Env:         env,
		Labels:      labels,
		StopSignal:  "SIGTERM",
		StopTimeout: &timeout,
	}
}

func hostConfig(opts map[string]string, lim limits, network, controllerSocket, runnerURL string) *container.HostConfig {
	init := true
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(network),
		Init:          &init,
		CapDrop:       []string{"ALL"},
		CapAdd:        runnerCaps,
		SecurityOpt:   []string{"no-new-privileges:true"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	hc.NanoCPUs = lim.nanoCPUs
	hc.Memory = lim.memory
	if lim.pids > 0 {
		hc.PidsLimit = &lim.pids
	}
	if strings.HasPrefix(runnerURL, "unix://") {
		hc.Mounts = []mount.Mount{socketMount(controllerSocket)}
	}
	return hc
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
	return nil
}

// checkReachable refuses a network the runner cannot dial the controller from: none, or a
// network of its own while the controller listens on the host's loopback.
func checkReachable(network, controllerURL string) error {
	if network == "none" {
		return provider.Errorf(provider.CodeInvalidArgument, "network none: the runner must reach the controller")
	}
	u, err := url.Parse(controllerURL)
	if err != nil || network == "host" {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback()) {
		return provider.Errorf(provider.CodeInvalidArgument,
			"a runner on Docker network %q cannot reach a controller at %s (the host's loopback); use network=host or start the controller with --advertise-url on an address that network reaches", network, controllerURL)
	}
	return nil
}

// bootEnvFile is the environment file the boot script sources: values
// single-quoted, so nothing in them is expanded.
func bootEnvFile(controllerURL, token string) []byte {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	return []byte(provider.EnvControllerURL + "=" + q(controllerURL) + "\n" +
		provider.EnvRunnerToken + "=" + q(token) + "\n")
}

// parseUser splits a validated numeric uid[:gid]; the gid defaults to the uid.
func parseUser(user string) (uid, gid int) {
	u, g, ok := strings.Cut(user, ":")
	uid, _ = strconv.Atoi(u)
	gid = uid
	if ok {
		gid, _ = strconv.Atoi(g)
	}
	return uid, gid
}

// tarFile is one entry of what copyIn puts into a container's root.
type tarFile struct {
	name     string
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

// copyIn extracts files into the container's root through the Engine API.
// Entries carry their owner, which Docker keeps (no CopyUIDGID).
func copyIn(ctx context.Context, cli *client.Client, id string, files []tarFile) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: now, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err := cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: io.Reader(&buf)})
	return typed("copy into container", err)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
