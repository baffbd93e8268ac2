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
	lim, err := limitsFrom(opts, req.Resources)
	if err != nil {
		return provider.Allocation{}, err
	}
	if err := checkReachable(opts["network"], req.ControllerURL); err != nil {
		return provider.Allocation{}, err
	}
	uid, gid := parseUser(opts["user"])
	unlock := p.lock(req.AllocationID)
	defer unlock()

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
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     containerConfig(req, opts),
		HostConfig: hostConfig(opts, lim),
	})
	if err != nil {
		err = typed("create container "+name, err)
		if provider.ErrorCode(err) == provider.CodeConflict {
			return provider.Allocation{}, provider.Errorf(provider.CodeConflict, "a container named %s already exists", name)
		}
		return provider.Allocation{}, err
	}
	fail := func(err error) (provider.Allocation, error) {
		// Nothing was handed out yet; leave no container behind.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = cli.ContainerRemove(rmCtx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		return provider.Allocation{}, err
	}
	files := []tarFile{
		{name: "workspace/", mode: 0o755, uid: uid, gid: gid, dir: true},
		{name: ".tether/", mode: 0o700, uid: uid, gid: gid, dir: true},
		{name: ".tether/env", mode: 0o600, uid: uid, gid: gid, data: bootEnvFile(req.ControllerURL, req.RunnerToken)},
		{name: strings.TrimPrefix(runnerPath, "/"), mode: 0o755, data: runner},
	}
	if err := copyIn(ctx, cli, created.ID, files); err != nil {
		return fail(err)
	}
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fail(typed("start container "+name, err))
	}
	return provider.Allocation{
		ID:   req.AllocationID,
		Root: workspaceDir,
		Info: map[string]string{
			"container": shortID(created.ID),
			"name":      name,
			"image":     image,
			"network":   opts["network"],
			"user":      opts["user"],
		},
	}, nil
}

func containerConfig(req provider.CreateRequest, opts map[string]string) *container.Config {
	env := []string{
		provider.EnvWorkspaceRoot + "=" + workspaceDir,
		provider.EnvAllocationID + "=" + req.AllocationID,
		provider.EnvWorkspaceID + "=" + req.WorkspaceID,
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
	timeout, _ := strconv.Atoi(opts["stop_timeout"])
	return &container.Config{
		Image:       opts["image"],
		User:        opts["user"],
		WorkingDir:  workspaceDir,
		Entrypoint:  []string{"/bin/sh", "-c", bootScript},
		Env:         env,
		Labels:      labels,
		StopSignal:  "SIGTERM",
		StopTimeout: &timeout,
	}
}

func hostConfig(opts map[string]string, lim limits) *container.HostConfig {
	init := true
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(opts["network"]),
		Init:          &init,
		CapDrop:       []string{"ALL"},
		SecurityOpt:   []string{"no-new-privileges:true"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	hc.NanoCPUs = lim.nanoCPUs
	hc.Memory = lim.memory
	if lim.pids > 0 {
		hc.PidsLimit = &lim.pids
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
