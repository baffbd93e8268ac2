// Command crashprovider is a provider plugin for the controller's tests: the local provider,
// except that Create panics for the workspace id "crash", so a test can watch the controller
// survive a plugin dying in the middle of an operation.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tetherhq/tether/plugins/local"
	"github.com/tetherhq/tether/plugins/provider"
)

type crashy struct{ *local.Provider }

func (c crashy) Create(ctx context.Context, req provider.CreateRequest) (provider.Allocation, error) {
	if req.WorkspaceID == "crash" {
		// Straight to fd 2: go-plugin forwards the plugin's os.Stderr over gRPC, which a
		// crash cuts short.
		fmt.Fprintln(os.NewFile(2, "stderr"), "crashprovider: about to fail on purpose")
		panic("crash requested by the test")
	}
	return c.Provider.Create(ctx, req)
}

func main() {
	provider.Serve(crashy{local.New("test")})
}
