package gitsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// gitError is a git command that ran and failed.
type gitError struct {
	code   int
	stderr string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git: exit status %d: %s", e.code, e.stderr)
}

// run runs git (see command) and returns its stdout, unless stdout is given.
func (r *Repo) run(ctx context.Context, stdin io.Reader, stdout io.Writer, inRepo bool, args ...string) ([]byte, error) {
	var out bytes.Buffer
	if stdout == nil {
		stdout = &out
	}
	tail := &tailWriter{}
	cmd := r.command(ctx, inRepo, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, tail
	err := cmd.Run()
	if err == nil {
		return out.Bytes(), nil
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return nil, cerr
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return nil, protocol.Errorf(protocol.CodeInternal, "running %s: %v", cmd.Path, err)
	}
	return out.Bytes(), &gitError{code: ee.ExitCode(), stderr: strings.TrimSpace(string(tail.buf))}
}

// fail types a failed git command's error with code and git's stderr tail; errors run already
// typed (context ended, git binary missing) pass through.
func fail(code protocol.Code, what string, err error) error {
	if pe, ok := err.(*protocol.Error); ok {
		return pe
	} else if ge, ok := err.(*gitError); ok && ge.stderr != "" {
		what += ": " + ge.stderr
	} else if err != nil {
		what += ": " + err.Error()
	}
	return protocol.Errorf(code, "%s", what)
}

func ctxErr(ctx context.Context) error {
	switch ctx.Err() {
	case nil:
		return nil
	case context.DeadlineExceeded:
		return protocol.Errorf(protocol.CodeTimeout, "git: %v", ctx.Err())
	}
	return protocol.Errorf(protocol.CodeCanceled, "git: %v", ctx.Err())
}

func exitCode(err error) int {
	if ge, ok := err.(*gitError); ok {
		return ge.code
	}
	return -1
}

func stderrHas(err error, subs ...string) bool {
	ge, ok := err.(*gitError)
	for _, s := range subs {
		if ok && strings.Contains(ge.stderr, s) {
			return true
		}
	}
	return false
}

func isLockErr(err error) bool { return stderrHas(err, ".lock': File exists") }

// command is the one place every git the controller runs is made. It reads no configuration but
// the base clone's own (which only the controller writes): no system or global config, no
// $HOME or XDG config, no templates; hooks and fsmonitor are off, only the source's transport is
// allowed (never ext::), it never prompts, and it runs in "/", never in a workspace. Its
// environment is the controller's less anything that would point git at another repository or
// inject configuration, with a C locale so stderr can be classified.
func (r *Repo) command(ctx context.Context, inRepo bool, args ...string) *exec.Cmd {
	git := r.Git
	if git == "" {
		git = "git"
	} else if strings.ContainsRune(git, filepath.Separator) {
		git, _ = filepath.Abs(git) // it runs in "/"
	}
	pre := []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
		"-c", "gc.autoDetach=false", "-c", "protocol.allow=never"}
	if p := transport(r.Source); p != "" && p != "ext" {
		pre = append(pre, "-c", "protocol."+p+".allow=always")
	}
	pre = append(pre, "-c", "protocol.ext.allow=never")
	if inRepo {
		pre = append(pre, "--git-dir="+r.Dir)
	}
	cmd := exec.CommandContext(ctx, git, append(pre, args...)...)
	cmd.Env, cmd.Dir = gitEnv(), "/"
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// transport is the name protocol.<name>.allow gives source's transport: "file" for a path,
// "ssh" for scp-like host:path and ssh URLs, a URL's scheme, a remote helper's name (x::addr).
func transport(source string) string {
	if h, _, ok := strings.Cut(source, "::"); ok && !strings.ContainsAny(h, "/:") {
		return strings.ToLower(h)
	}
	if IsLocal(source) {
		return "file"
	}
	scheme, _, ok := strings.Cut(source, "://")
	switch scheme = strings.ToLower(scheme); {
	case !ok, scheme == "git+ssh", scheme == "ssh+git":
		return "ssh"
	default:
		return scheme
	}
}

// dropEnv are variables that would point git at another repository or inject configuration.
var dropEnv = map[string]bool{
	"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true, "GIT_OBJECT_DIRECTORY": true,
	"GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_COMMON_DIR": true, "GIT_NAMESPACE": true,
	"GIT_PREFIX": true, "GIT_QUARANTINE_PATH": true, "GIT_CONFIG": true, "GIT_CONFIG_PARAMETERS": true,
	"GIT_CONFIG_COUNT": true, "GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG_NOSYSTEM": true,
	"GIT_TEMPLATE_DIR": true, "GIT_EXEC_PATH": true, "GIT_CEILING_DIRECTORIES": true,
	"GIT_DISCOVERY_ACROSS_FILESYSTEM": true, "GIT_ALLOW_PROTOCOL": true, "GIT_PROTOCOL_FROM_USER": true,
	"GIT_TERMINAL_PROMPT": true, "HOME": true, "XDG_CONFIG_HOME": true, "LC_ALL": true, "LANG": true, "LANGUAGE": true,
}

// noHome is the HOME and XDG_CONFIG_HOME git gets: a path that does not exist, so no per-user
// file (.gitconfig, .git-credentials, git/attributes) is ever read. (ssh finds the operator's
// keys through the password database, not $HOME.)
const noHome = "/nonexistent/tether-no-home"

func gitEnv() []string {
	environ := os.Environ()
	env := make([]string, 0, len(environ)+9)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if dropEnv[k] || strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+noHome,
		"XDG_CONFIG_HOME="+noHome, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "LANG=C", "LANGUAGE=C")
}

// tailWriter keeps the last stderrTail bytes written to it.
type tailWriter struct{ buf []byte }

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	return len(p), nil
}

// errWriter remembers w's first error, which exec would otherwise hide behind git's SIGPIPE exit.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}
