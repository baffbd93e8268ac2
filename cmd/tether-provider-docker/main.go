// Command tether-provider-docker is the Docker sandbox provider plugin. The
// controller starts it; run by hand it only explains that it is a plugin.
package main

import (
	"github.com/tetherhq/tether/plugins/docker"
	"github.com/tetherhq/tether/plugins/provider"
)

// version is set at link time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	provider.Serve(docker.New(version))
}
