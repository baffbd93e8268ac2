package provider

import (
	"context"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// OpenForTest opens a plugin with or without Pdeathsig, so the external
// tests can check the plugin's own parent watchdog in isolation.
func OpenForTest(ctx context.Context, path string, logger hclog.Logger, pdeathsig bool) (*Client, error) {
	attr := &syscall.SysProcAttr{}
	if pdeathsig {
		attr.Pdeathsig = syscall.SIGKILL
	}
	return open(ctx, path, logger, attr)
}
