// Package docker is the Docker sandbox provider: each allocation is a
// container, made through the Docker Engine API (the official Go client, not
// the docker CLI), isolated by default: a network of its own with no route
// to the host's loopback (the runner reaches the controller through the
// controller's runner socket, bind-mounted below a directory only the runner
// may enter), memory, CPU and pids limits, an init process, no-new-privileges,
// and every capability dropped but the runner's SETUID, SETGID and KILL. The
// runner is the container's root; the agent's commands run as an
// unprivileged uid (the user option) that owns /workspace.
//
// Any image with /bin/sh works: the provider copies the static runner into
// the container at create time, so the image only has to supply the tools
// the workspace's commands need. Images are never pulled; the default,
// tether-runner:dev, is built locally (make image).
//
// The provider owns only the containers and networks it made: they carry the
// labels tether.workspace, tether.allocation and tether.provider=docker, and a
// container named like one of its allocations without them is refused.
package docker
