package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/protocol"
)

func newDemoCmd(c *cli) *cobra.Command {
	var keep bool
	var prov string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Walk the whole journey on a temporary controller with the local provider",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), c, keep, prov) },
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary data directory")
	cmd.Flags().StringVar(&prov, "provider", "local", "provider of the demo's workspaces: local or docker (docker needs \"make image\" first)")
	return cmd
}

// runDemo starts a real controller on a temporary data dir, creates a local workspace from a
// sample Git repository, runs commands in it through the runner and shows the records.
func runDemo(ctx context.Context, c *cli, keep bool, prov string) error {
	tmp, err := os.MkdirTemp("", "tether-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(tmp)
	}
	step := func(format string, args ...any) { c.printf("\n==> "+format+"\n", args...) }

	step("starting a controller on a temporary data dir (%s)", tmp)
	cfg, err := serveFlags{readyTimeout: 30 * time.Second, provider: prov, sweepGrace: time.Hour,
		forwardLimits: forward.Limits{MaxConns: forward.DefaultMaxConns}}.config(filepath.Join(tmp, "data"))
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := controller.New(ctx, cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srvCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, l) }()
	defer func() { stop(); <-served }()
	cl, err := client.New("http://"+l.Addr().String(), srv.OperatorToken())
	if err != nil {
		return err
	}
	c.printf("controller on http://%s\n", l.Addr())
	// The demo's own CLI invocations talk to this controller.
	demoCLI := func(args ...string) error {
		return c.run(append([]string{"--addr", cl.Addr(), "--token", srv.OperatorToken()}, args...)...)
	}

	step("making a sample Git repository")
	repo := filepath.Join(tmp, "sample-repo")
	if err := makeSampleRepo(ctx, repo); err != nil {
		return err
	}
	c.printf("%s: README.md, hello.sh, 2 commits\n", repo)

	step("tether workspace create --provider %s --source %s", prov, repo)
	start := time.Now()
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "demo", Provider: prov})
	if err != nil {
		return err
	}
	if ws.State != api.StateReady {
		return protocol.Errorf(protocol.CodeProviderFailed, "workspace %s is %s: %s", ws.ID, ws.State, ws.Reason)
	}
	if _, err := importSource(ctx, cl, ws.ID, repo, nil); err != nil {
		return err
	}
	c.printf("workspace %s (%s) ready in %s, runner connected, root %s\n", ws.ID, ws.Name, time.Since(start).Round(time.Millisecond), ws.Root)

	for _, run := range []struct{ shown, script string }{
		{"git log --oneline", withGit("git log --oneline")},
		{"git status --short --branch", withGit("git status --short --branch")},
		{"sh -c './hello.sh; echo \"pwd: $(pwd)\"; echo to stderr >&2'", "./hello.sh; echo \"pwd: $(pwd)\"; echo 'to stderr' >&2"},
		{"sh -c 'exit 3'", "exit 3"},
	} {
		step("tether exec %s -- %s", ws.Name, run.shown)
		exit, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", run.script}}, nil, c.stdout, c.stderr)
		if err != nil {
			return err
		}
		c.printf("(exit status %d)\n", exit.Status())
	}

	if err := demoDetached(ctx, c, cl, demoCLI, step, ws); err != nil {
		return err
	}
	if err := demoFiles(c, demoCLI, step, ws.ID, ws.Name, tmp); err != nil {
		return err
	}
	if err := demoArtifact(ctx, c, cl, demoCLI, step, ws, tmp); err != nil {
		return err
	}

	if err := demoService(ctx, c, cl, demoCLI, step, ws); err != nil {
		return err
	}
	if err := demoProject(ctx, c, cl, demoCLI, step, repo, prov); err != nil {
		return err
	}

	step("tether run ls %s", ws.Name)
	if err := demoCLI("run", "ls", ws.ID); err != nil {
		return err
	}
	step("tether workspace ls")
	if err := demoCLI("workspace", "ls"); err != nil {
		return err
	}
	if err := demoCheckpointFork(ctx, c, cl, demoCLI, step, repo, prov); err != nil {
		return err
	}
	if err := demoSnapshot(ctx, c, cl, demoCLI, step, ws); err != nil {
		return err
	}
	if err := demoPull(ctx, c, cl, demoCLI, step, repo, prov); err != nil {
		return err
	}
	step("done")
	// Later capabilities (artifacts, services) join the journey here.
	return nil
}

// demoSnapshot leaves work uncommitted, captures the workspace, destroys its sandbox and
// restores it on a new one: the Git state, the unpushed commit and the dirty file survive.
func demoSnapshot(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), ws api.Workspace) error {
	state := withGit("git log --oneline -1; git status --short --branch")
	step("tether exec %s -- sh -c 'echo wip >> README.md; git commit -qam wip; echo draft > notes.txt'", ws.Name)
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c",
		"echo wip >> README.md && " + withGit("git -c user.name=demo -c user.email=demo@tether.invalid commit -qam 'Work in progress'") + " && echo draft > notes.txt && " + state}},
		nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("tether snapshot create %s", ws.Name)
	snap, err := cl.CreateSnapshot(ctx, ws.ID)
	if err != nil {
		return err
	}
	c.printf("%s: %d entries, %s stored, sha256 %s…, git %s\n", snap.ID, snap.Entries, humanBytes(snap.Bytes), snap.SHA256[:16], gitLine(snap.Git))

	step("tether workspace rm %s   # the sandbox is destroyed", ws.Name)
	if _, err := cl.DeleteWorkspace(ctx, ws.ID); err != nil {
		return err
	}
	c.printf("removed %s (allocation %s); its runner and sandbox directory are gone\n", ws.ID, ws.AllocationID)

	step("tether snapshot restore %s --name demo-restored", snap.ID)
	res, err := cl.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: "demo-restored"})
	if err != nil {
		return err
	}
	c.printf("workspace %s on a new allocation %s\n", res.Workspace.ID, res.Workspace.AllocationID)
	step("tether exec demo-restored -- sh -c 'git log --oneline -1; git status --short --branch'")
	if _, err := cl.Exec(ctx, res.Workspace.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", state}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("tether snapshot ls %s", ws.Name)
	if err := demoCLI("snapshot", "ls", ws.ID); err != nil {
		return err
	}
	return demoCloseReopen(ctx, c, cl, demoCLI, step, res.Workspace)
}

// demoCloseReopen leaves unsaved work, closes the workspace (which saves it first and releases
// the sandbox) and reopens it on a new allocation.
func demoCloseReopen(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), ws api.Workspace) error {
	step("tether exec %s -- sh -c 'echo \"more work\" >> notes.txt'   # unsaved work", ws.Name)
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "echo 'more work' >> notes.txt"}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("tether workspace close %s --check", ws.Name)
	if err := demoCLI("workspace", "close", ws.ID, "--check"); err != nil {
		return err
	}
	step("tether workspace close %s   # saves a verified snapshot first, then releases the sandbox", ws.Name)
	if err := demoCLI("workspace", "close", ws.ID); err != nil {
		return err
	}
	step("tether workspace reopen %s", ws.Name)
	if err := demoCLI("workspace", "reopen", ws.ID); err != nil {
		return err
	}
	step("tether exec %s -- sh -c 'cat notes.txt; git log --oneline -1'", ws.Name)
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "cat notes.txt; " + withGit("git log --oneline -1")}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("tether workspace events %s", ws.Name)
	if err := demoCLI("workspace", "events", ws.ID); err != nil {
		return err
	}
	_, err := cl.DeleteWorkspace(ctx, ws.ID)
	return err
}

// run runs a CLI command on c's streams, so the demo shows the CLI's real output.
func (c *cli) run(args ...string) error {
	cmd := newRootCmd(&cli{stdin: c.stdin, stdout: c.stdout, stderr: c.stderr})
	cmd.SetArgs(args)
	cmd.SetOut(c.stdout)
	cmd.SetErr(c.stderr)
	return cmd.Execute()
}

func makeSampleRepo(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"README.md": "# sample\nA repository the Tether demo copies into a workspace.\n",
		"hello.sh":  "#!/bin/sh\necho \"hello from a Tether workspace\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Tether Demo", "GIT_AUTHOR_EMAIL=demo@tether.invalid",
			"GIT_COMMITTER_NAME=Tether Demo", "GIT_COMMITTER_EMAIL=demo@tether.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "README.md"}, {"commit", "-q", "-m", "Add README"},
		{"add", "hello.sh"}, {"commit", "-q", "-m", "Add hello.sh"},
	} {
		if err := git(args...); err != nil {
			return err
		}
	}
	return nil
}

// demoFiles puts a generated file into the workspace, lists it, gets it back and shows that
// both ends hash the same; then shows the guard refusing a path out of the workspace.
func demoFiles(c *cli, demoCLI func(...string) error, step func(string, ...any), id, name, tmp string) error {
	data := make([]byte, 256<<10)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	local := filepath.Join(tmp, "data.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		return err
	}
	step("tether files put %s %s data.bin", name, local)
	if err := demoCLI("files", "put", id, local, "data.bin"); err != nil {
		return err
	}
	step("tether files ls -l %s", name)
	if err := demoCLI("files", "ls", "-l", id); err != nil {
		return err
	}
	back := filepath.Join(tmp, "data.back")
	step("tether files get %s data.bin -o %s", name, back)
	if err := demoCLI("files", "get", id, "data.bin", "-o", back); err != nil {
		return err
	}
	got, err := os.ReadFile(back)
	if err != nil {
		return err
	}
	sent, received := sha256.Sum256(data), sha256.Sum256(got)
	if sent != received {
		return protocol.Errorf(protocol.CodeFailed, "the file came back different: sha256 %x sent, %x received", sent, received)
	}
	c.printf("sha256 match: %x (%d bytes there and back)\n", received, len(got))
	step("tether files get %s ../../etc/passwd", name)
	err = demoCLI("files", "get", id, "../../etc/passwd")
	if protocol.CodeOf(err) != protocol.CodePathEscape {
		return protocol.Errorf(protocol.CodeInternal, "the guard did not refuse a path out of the workspace: %v", err)
	}
	c.printf("refused: %v\n", err)
	return nil
}

// withGit runs a git command line in the workspace when the sandbox has git (the local
// provider's host does; the FROM-scratch Docker image has only busybox) and otherwise says so,
// showing the .git directory the snapshot still carries.
func withGit(cmd string) string {
	return "if command -v git >/dev/null 2>&1; then " + cmd +
		"; else echo \"(no git in this sandbox; .git holds $(find .git -type f | wc -l) files)\"; fi"
}

// demoArtifact saves a synthetic API response as an artifact and has the agent's side install it
// through the runner, as an agent calling download_artifact would.
func demoArtifact(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), ws api.Workspace, tmp string) error {
	resp := filepath.Join(tmp, "api-response.json")
	if err := os.WriteFile(resp, []byte(`{"status":200,"items":[{"id":1,"title":"first"},{"id":2,"title":"second"}]}`+"\n"), 0o600); err != nil {
		return err
	}
	step("tether artifact put %s --workspace %s", resp, ws.Name)
	f, err := os.Open(resp)
	if err != nil {
		return err
	}
	defer f.Close()
	art, err := cl.PutArtifact(ctx, ws.ID, "api-response.json", f)
	if err != nil {
		return err
	}
	c.printf("%s: %d bytes, sha256 %s, untrusted %v\n", art.ID, art.Bytes, art.SHA256, art.Untrusted)
	step("tether exec %s -- tether-runner artifact download %s inbox/response.json   # as the agent would", ws.Name, art.ID)
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"tether-runner", "artifact", "download", art.ID, "inbox/response.json"}}, nil, c.stdout, c.stderr); err != nil {
		return err
	}
	step("tether exec %s -- sh -c 'stat -c %%s inbox/response.json; sha256sum inbox/response.json'", ws.Name)
	_, err = cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "stat -c %s inbox/response.json; sha256sum inbox/response.json"}}, nil, c.stdout, c.stderr)
	return err
}
