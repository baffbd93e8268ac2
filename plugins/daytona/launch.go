package daytona

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// runnerSessionPrefix names the process sessions that run a runner; Stop
// ends them before it stops the sandbox.
const runnerSessionPrefix = "tether-runner-"

// execTimeout bounds the short setup commands run through process/execute.
const execTimeout = 60

// runEnv is what the runner is started with.
type runEnv struct {
	url, token, alloc, ws string
	extra                 map[string]string
}

// paths are where the provider keeps things in a sandbox: under the user's
// home, the workspace, and a private (0700) .tether for the runner binary,
// its log and the one-use token file.
type paths struct{ home, root, dir, runner string }

func sandboxPaths(ctx context.Context, tb *Toolbox) (paths, error) {
	home, err := tb.HomeDir(ctx)
	if err != nil {
		return paths{}, typed("home dir of "+tb.sandbox, err)
	}
	if !path.IsAbs(home) || strings.ContainsAny(home, "\x00\n") {
		return paths{}, provider.Errorf(provider.CodeProviderFailed, "sandbox %s reports home dir %q, not an absolute path", tb.sandbox, home)
	}
	home = path.Clean(home)
	dir := path.Join(home, ".tether")
	return paths{home: home, root: path.Join(home, workspaceSub), dir: dir, runner: path.Join(dir, "tether-runner")}, nil
}

// run executes a short setup command and requires exit 0.
func run(ctx context.Context, tb *Toolbox, what, command string) error {
	res, err := tb.Execute(ctx, command, execTimeout)
	if err != nil {
		return typed(what+" in "+tb.sandbox, err)
	}
	if res.ExitCode != 0 {
		out := res.Result
		if len(out) > 300 {
			out = out[:300] + "…"
		}
		return provider.Errorf(provider.CodeProviderFailed, "%s in %s: exit %d: %s", what, tb.sandbox, res.ExitCode, strings.TrimSpace(out))
	}
	return nil
}

// prepare makes the workspace and the private .tether directory.
func prepare(ctx context.Context, tb *Toolbox, p paths) error {
	return run(ctx, tb, "prepare directories", "sh -c "+q("mkdir -p "+q(p.root)+" "+q(p.dir)+" && chmod 700 "+q(p.dir)))
}

// installRunner uploads the runner to a temp name and moves it into place
// with one rename: Daytona's upload truncates its destination in place, so
// uploading over the runner itself would fail while it runs (a busy text
// file) and leave half a binary when the upload breaks. A failed install
// removes its temp file and leaves the installed runner as it was.
func installRunner(ctx context.Context, tb *Toolbox, p paths, binary string) (err error) {
	tmp := path.Join(p.dir, ".tether-runner.upload-"+randHex())
	defer func() {
		if err != nil {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = tb.DeleteFile(c, tmp)
		}
	}()
	if err := tb.Upload(ctx, tmp, binary); err != nil {
		return typed("upload runner to "+tb.sandbox, err)
	}
	return run(ctx, tb, "install runner", "sh -c "+q("chmod 755 "+q(tmp)+" && mv -f "+q(tmp)+" "+q(p.runner)))
}

// launch uploads runnerBinary when it is set, then starts the runner in a
// new session and returns the workspace root.
//
// The token never appears in a command's text: Daytona writes session
// commands to a file in the sandbox and to its audit log. It is uploaded
// into the private .tether directory as a file the session's shell reads
// into the runner's environment and deletes before it starts the runner
// (which takes it out of its environment at once).
func (p *Provider) launch(ctx context.Context, cli *Client, sb Sandbox, runnerBinary string, e runEnv) (string, error) {
	tb, err := cli.Toolbox(ctx, sb)
	if err != nil {
		return "", err
	}
	ps, err := sandboxPaths(ctx, tb)
	if err != nil {
		return "", err
	}
	if err := prepare(ctx, tb, ps); err != nil {
		return "", err
	}
	if runnerBinary != "" {
		if err := installRunner(ctx, tb, ps, runnerBinary); err != nil {
			return "", err
		}
	}
	tokenFile := path.Join(ps.dir, "boot-"+randHex())
	if err := tb.UploadBytes(ctx, tokenFile, []byte(e.token+"\n")); err != nil {
		return "", typed("upload the runner's token to "+sb.ID, err)
	}
	started := false
	defer func() {
		if !started {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = tb.DeleteFile(c, tokenFile)
		}
	}()
	env := map[string]string{
		provider.EnvControllerURL: e.url, provider.EnvAllocationID: e.alloc,
		provider.EnvWorkspaceID: e.ws, provider.EnvWorkspaceRoot: ps.root,
	}
	for k, v := range e.extra {
		env[k] = v
	}
	session := runnerSessionPrefix + randHex()
	if err := tb.CreateSession(ctx, session); err != nil {
		return "", typed("create session in "+sb.ID, err)
	}
	// A child shell runs the script, so its exec replaces that shell and
	// not the session's own.
	if _, err := tb.ExecAsync(ctx, session, "sh -c "+q(runnerScript(ps, tokenFile, env))); err != nil {
		return "", typed("start runner in "+sb.ID, err)
	}
	started = true
	return ps.root, nil
}

// runnerScript is the session command's script: no secret in it.
func runnerScript(ps paths, tokenFile string, env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	// The token file goes first, whatever happens next: no secret is left behind by a failed cd.
	fmt.Fprintf(&b, "IFS= read -r %s < %s; rm -f %s\n", provider.EnvRunnerToken, q(tokenFile), q(tokenFile))
	fmt.Fprintf(&b, "cd %s || exit 97\n", q(ps.root))
	fmt.Fprintf(&b, "[ -n \"$%s\" ] || exit 98\nexport %s\n", provider.EnvRunnerToken, provider.EnvRunnerToken)
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, q(env[k]))
	}
	fmt.Fprintf(&b, "exec %s >>%s 2>&1\n", q(ps.runner), q(path.Join(ps.dir, "runner.log")))
	return b.String()
}

// endRunner ends the runner's sessions: Daytona gives their processes
// SIGTERM, then SIGKILL, so the runner stops its work and says goodbye,
// which stopping the sandbox (SIGKILL to everything but the daemon) would
// not let it do.
func endRunner(ctx context.Context, tb *Toolbox) error {
	sessions, err := tb.Sessions(ctx)
	if err != nil {
		return typed("list sessions of "+tb.sandbox, err)
	}
	for _, s := range sessions {
		if !strings.HasPrefix(s.SessionID, runnerSessionPrefix) {
			continue
		}
		if err := tb.DeleteSession(ctx, s.SessionID); err != nil && !notFound(err) {
			return typed("end session "+s.SessionID+" of "+tb.sandbox, err)
		}
	}
	return nil
}
