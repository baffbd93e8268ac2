package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// demoPull ends the journey where a user's day ends: an agent works in a workspace made from the
// sample checkout (it edits, adds and commits) while the user edits the same file on the host;
// workspace pull brings the agent's work back, leaves the user's edit alone and keeps the
// agent's version of it aside, then --theirs takes the agent's version.
func demoPull(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), repo, prov string) error {
	step("tether workspace create --provider %s --source %s --name demo-pull", prov, repo)
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "demo-pull", Provider: prov})
	if err != nil {
		return err
	}
	defer func() { _, _ = cl.DeleteWorkspace(context.WithoutCancel(ctx), ws.ID) }()
	if ws.State != api.StateReady {
		return protocol.Errorf(protocol.CodeProviderFailed, "workspace %s is %s: %s", ws.ID, ws.State, ws.Reason)
	}
	if ws, err = importSource(ctx, cl, ws.ID, repo, nil); err != nil {
		return err
	}
	c.printf("workspace %s, source %s, base %s\n", ws.Name, ws.SourceDir, ws.SourceBase)

	agent := "printf '\\nUsage: ./hello.sh\\n' >> README.md && echo 'a feature' > feature.txt && " +
		withGit("git add -A && git -c user.name=agent -c user.email=agent@tether.invalid commit -qm 'Add usage and a feature'") +
		" && chmod 644 hello.sh"
	step("tether exec demo-pull -- sh -c 'edit README.md; add feature.txt; git commit; chmod 644 hello.sh'   # the agent's work")
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", agent}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("echo 'A line of mine.' >> %s/README.md   # you edit the same file meanwhile", repo)
	f, err := os.OpenFile(filepath.Join(repo, "README.md"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("A line of mine.\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	recovery := filepath.Join(filepath.Dir(repo), "pull-recovery")
	step("tether workspace pull demo-pull --recovery-dir %s   # exits 40: a conflict remains", recovery)
	if err := demoCLI("workspace", "pull", ws.ID, "--recovery-dir", recovery); err != nil {
		var st exitStatus
		if !errors.As(err, &st) || st != pullConflictStatus {
			return err
		}
		c.printf("(exit status %d)\n", int(st))
	}
	step("git -C %s status --short; git log --oneline -3 tether/demo-pull", repo)
	for _, args := range [][]string{{"status", "--short"}, {"log", "--oneline", "-3", "tether/demo-pull"}} {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...)
		cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
		if err := cmd.Run(); err != nil && args[0] == "status" {
			return err
		}
	}
	step("tether workspace pull demo-pull --theirs --recovery-dir %s   # take the agent's README; yours is kept aside", recovery+"-theirs")
	return demoCLI("workspace", "pull", ws.ID, "--theirs", "--recovery-dir", recovery+"-theirs")
}
