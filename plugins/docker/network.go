package docker

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/plugins/provider"
)

// Network modes (the network option).
const (
	// networkPrivate gives each allocation a bridge network of its own, made at Create and
	// removed at Destroy. A container on it has its own loopback: no route reaches a service
	// listening on the host's 127.0.0.1 (the controller's port included). It may reach the
	// outside through the network's gateway (NAT, where dockerd manages iptables), as any
	// container on a bridge network does.
	networkPrivate = "private"
	// networkInternal is networkPrivate with the network marked Internal: where dockerd
	// manages iptables, nothing leaves the network's subnet either.
	networkInternal = "internal"
	networkHost     = "host"
)

// ownNetwork says whether the mode is one of the per-allocation networks the provider makes.
func ownNetwork(mode string) bool { return mode == networkPrivate || mode == networkInternal }

// networkName is the name of allocation id's own network (the container's, too).
func networkName(id string) string { return containerName(id) }

// Where a runner on a private network finds the controller: the directory of the controller's
// runner socket is bind-mounted here (read-only: connecting needs no write to the mount), under
// /run/tether, which the image copy makes 0700 and the runner's own, so the agent's uid cannot
// reach it.
const (
	runDir           = "/run/tether"
	controllerMount  = runDir + "/controller"
	labelNetworkMode = "tether.network"
	// labelRunnerURL keeps the URL the runner was told at create when it is the socket's, for
	// a Start: a runner on a private network dials the socket whatever the controller's URL.
	labelRunnerURL = "tether.runner-url"
)

// runnerURLFor is the URL the runner dials for a controller socket at hostSocket.
func runnerURLFor(hostSocket string) string {
	return "unix://" + controllerMount + "/" + filepath.Base(hostSocket)
}

// socketMount bind-mounts the directory of the controller's runner socket.
func socketMount(hostSocket string) mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: filepath.Dir(hostSocket), Target: controllerMount, ReadOnly: true}
}

// createNetwork makes allocation id's own network and returns its id. A network of that name
// already there (Docker 20.10 allows two of a name, and only warns) is a conflict: the one just
// made is removed again and the other left alone.
func createNetwork(ctx context.Context, cli *client.Client, mode string, req provider.CreateRequest) (string, error) {
	name := networkName(req.AllocationID)
	labels := map[string]string{
		provider.LabelWorkspace: req.WorkspaceID, provider.LabelAllocation: req.AllocationID,
		labelOwn: Name, labelURL: req.ControllerURL, labelNetworkMode: mode,
	}
	for k, v := range req.Labels {
		labels[k] = v
	}
	if existing, err := ownedNetworks(ctx, cli, req.AllocationID); err != nil {
		return "", err
	} else if len(existing) > 0 {
		return "", provider.Errorf(provider.CodeConflict, "a network named %s already exists", name)
	}
	res, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge", Internal: mode == networkInternal, Labels: labels,
	})
	if err != nil {
		if strings.Contains(err.Error(), "non-overlapping") || strings.Contains(err.Error(), "address pool") {
			return "", provider.Errorf(provider.CodeProviderFailed,
				"Docker has no address pool left for another private network (each workspace gets one; dockerd's default-address-pools bound how many): %v", err)
		}
		err = typed("create network "+name, err)
		if provider.ErrorCode(err) == provider.CodeConflict {
			return "", provider.Errorf(provider.CodeConflict, "a network named %s already exists", name)
		}
		return "", err
	}
	for _, w := range res.Warning {
		if strings.Contains(w, "already exists") {
			removeNetwork(ctx, cli, res.ID)
			return "", provider.Errorf(provider.CodeConflict, "a network named %s already exists", name)
		}
	}
	return res.ID, nil
}

// ownedNetworks lists the ids of the networks this provider made for allocation id.
func ownedNetworks(ctx context.Context, cli *client.Client, id string) ([]string, error) {
	res, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).
		Add("label", labelOwn+"="+Name).Add("label", provider.LabelAllocation+"="+id)})
	if err != nil {
		return nil, typed("list networks", err)
	}
	var ids []string
	for _, n := range res.Items {
		// The label filter matches on the label; the name must be ours too.
		if n.Name == networkName(id) && n.Labels[provider.LabelAllocation] == id && n.Labels[labelOwn] == Name {
			ids = append(ids, n.ID)
		}
	}
	return ids, nil
}

// removeOwnedNetworks removes every network this provider made for allocation id. A container
// still attached (someone connected one by hand) is disconnected first: a workspace's network
// never outlives it.
func removeOwnedNetworks(ctx context.Context, cli *client.Client, id string) error {
	ids, err := ownedNetworks(ctx, cli, id)
	if err != nil {
		return err
	}
	for _, nid := range ids {
		if insp, err := cli.NetworkInspect(ctx, nid, client.NetworkInspectOptions{}); err == nil {
			for cid := range insp.Network.Containers {
				_, _ = cli.NetworkDisconnect(ctx, nid, client.NetworkDisconnectOptions{Container: cid, Force: true})
			}
		}
		_, err := cli.NetworkRemove(ctx, nid, client.NetworkRemoveOptions{})
		if err = typed("remove network "+networkName(id), err); err != nil && provider.ErrorCode(err) != provider.CodeNotFound {
			return err
		}
	}
	return nil
}

// removeNetwork removes one network by id, for a Create that fails after making it.
func removeNetwork(ctx context.Context, cli *client.Client, id string) {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = cli.NetworkRemove(rmCtx, id, client.NetworkRemoveOptions{})
}
