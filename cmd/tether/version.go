package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// defaultVersionTimeout bounds the question to the controller: `tether version` answers for the
// client promptly whatever the network does.
const defaultVersionTimeout = 3 * time.Second

// versionInfo is what `tether version --json` prints.
type versionInfo struct {
	Client clientVersion  `json:"client"`
	Server *serverVersion `json:"server,omitempty"`
	// ServerError says why there is no server part, when one was asked for.
	ServerError string `json:"server_error,omitempty"`
}

type clientVersion struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

type serverVersion struct {
	Addr    string `json:"addr"`
	Version string `json:"version"`
	ID      string `json:"id"`
	Status  string `json:"status"`
}

func newVersionCmd(c *cli) *cobra.Command {
	var asJSON, clientOnly bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and, when it answers, the controller's",
		Long: "Print the client's version and, when it answers, the controller's (its /healthz, which " +
			"needs no token). An unreachable controller is reported and is not an error: the client's " +
			"version is still true.",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := versionInfo{Client: clientVersion{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}}
			if !clientOnly {
				info.Server, info.ServerError = c.serverVersion(cmd.Context(), timeout)
			}
			if asJSON {
				return c.printJSON(info)
			}
			c.printf("Client: tether %s (%s %s/%s)\n", info.Client.Version, info.Client.Go, info.Client.OS, info.Client.Arch)
			switch {
			case info.Server != nil:
				c.printf("Server: tether %s at %s (%s)\n", info.Server.Version, info.Server.Addr, info.Server.Status)
			case info.ServerError != "":
				c.printf("Server: %s\n", info.ServerError)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {client, server} as JSON")
	cmd.Flags().BoolVar(&clientOnly, "client", false, "the client's version only: do not ask the controller")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultVersionTimeout, "how long to wait for the controller's answer")
	return cmd
}

// serverVersion asks the controller the CLI would talk to for its health, without credentials.
func (c *cli) serverVersion(ctx context.Context, timeout time.Duration) (*serverVersion, string) {
	t, err := c.target()
	if err != nil {
		return nil, err.Error()
	}
	cl, err := client.New(t.addr, "")
	if err != nil {
		return nil, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := cl.Health(ctx)
	if err != nil {
		return nil, fmt.Sprintf("not reachable: %s", protocol.AsError(err).Message)
	}
	return &serverVersion{Addr: cl.Addr(), Version: h.Version, ID: h.ID, Status: h.Status}, ""
}
