package main

import (
	"context"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// demoProject makes the sample repository a project and gives two tasks isolated workspaces of
// it: each on its own branch, provisioned inside its allocation; one commits, and inspection
// tells which work is delivered. The workspaces are removed at the end.
func demoProject(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), repo, prov string) error {
	step("tether project create --source %s --provision 'echo provisioned in $(pwd) > .provisioned'", repo)
	p, err := cl.CreateProject(ctx, api.CreateProjectRequest{Name: "sample", Source: repo,
		Provision: []string{"echo provisioned in $(pwd) > .provisioned"}})
	if err != nil {
		return err
	}
	if err := demoCLI("project", "show", p.ID); err != nil {
		return err
	}
	var tasks []api.Workspace
	for _, name := range []string{"task-1", "task-2"} {
		step("tether workspace create --project sample --name %s --provider %s", name, prov)
		ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: name, Project: p.ID, Provider: prov})
		if err != nil {
			return err
		}
		if ws.State != api.StateReady {
			return protocol.Errorf(protocol.CodeFailed, "workspace %s is %s: %s", ws.Name, ws.State, ws.Reason)
		}
		c.printf("workspace %s: branch %s from %s at %s (%s checkout)\n", ws.Name, ws.Git.Branch, ws.Git.BaseRef, shortID(ws.Git.BaseCommit), ws.Git.Strategy)
		tasks = append(tasks, ws)
	}
	defer func() {
		for _, ws := range tasks {
			_, _ = cl.DeleteWorkspace(context.WithoutCancel(ctx), ws.ID)
		}
	}()
	for _, ws := range tasks {
		step("tether exec %s -- sh -c 'cat .provisioned; git status --short --branch'", ws.Name)
		if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "cat .provisioned; " + withGit("git status --short --branch")}}, nil, c.stdout, c.stderr); err != nil {
			return err
		}
	}
	commit := "echo 'task-1 was here' >> README.md && git -c user.name=Agent -c user.email=agent@tether.invalid commit -qam 'task-1 work' && git log --oneline -1"
	step("tether exec task-1 -- sh -c %q", commit)
	if _, err := cl.Exec(ctx, tasks[0].ID, protocol.ExecArgs{Argv: []string{"sh", "-c", withGit(commit)}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	for _, ws := range tasks {
		step("tether workspace inspect %s", ws.Name)
		if err := demoCLI("workspace", "inspect", ws.ID); err != nil {
			return err
		}
	}
	for _, ws := range tasks {
		in, err := cl.InspectWorkspace(ctx, ws.ID)
		if err != nil {
			return err
		}
		switch in.Delivery {
		case api.DeliveredByAncestry:
			c.printf("(%s: everything it holds is in %s at the source: delivered by ancestry)\n", ws.Name, p.BaseRef)
		default:
			c.printf("(%s: %d commit(s) not in %s at the source: %s)\n", ws.Name, in.Ahead, p.BaseRef, in.Delivery)
		}
	}
	return nil
}
