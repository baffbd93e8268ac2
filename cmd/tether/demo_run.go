package main

import (
	"context"
	"io"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// demoDetached starts a run detached, as an agent would, and reads its output back from the
// runner's log: it goes on without any client, and its output is kept with offsets.
func demoDetached(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), ws api.Workspace) error {
	step("tether exec --detach %s -- sh -c 'for i in 1 2 3; do echo step $i; sleep 0.2; done'", ws.Name)
	res, err := cl.ExecRun(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "for i in 1 2 3; do echo step $i; sleep 0.2; done"}, Detach: true},
		client.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		return err
	}
	c.printf("%s\n", res.RunID)
	step("tether run logs %s --follow   # reads the run's log on the runner, from any offset", res.RunID)
	if err := demoCLI("run", "logs", res.RunID, "--follow"); err != nil {
		return err
	}
	step("tether run wait %s", res.RunID)
	return demoCLI("run", "wait", res.RunID)
}
