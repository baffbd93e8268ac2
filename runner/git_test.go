package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// gitFixture runs the real git for test fixtures, isolated from the user's configuration.
func gitFixture(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git binary")
	}
	cmd := exec.Command(bin, append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// gitSource makes a repository with two commits on main and returns it with both.
func gitSource(t *testing.T) (dir, first, second string) {
	t.Helper()
	dir = t.TempDir()
	gitFixture(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitFixture(t, dir, "add", "-A")
	gitFixture(t, dir, "commit", "-q", "-m", "first")
	first = gitFixture(t, dir, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(dir, "b.txt"), bytes.Repeat([]byte("b"), 600<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	gitFixture(t, dir, "add", "-A")
	gitFixture(t, dir, "commit", "-q", "-m", "second")
	return dir, first, gitFixture(t, dir, "rev-parse", "HEAD")
}

// opBody runs an operation whose request carries body as the controller sends it (a framed
// body through protocol.BodyWriter); cut sends half of it and aborts instead of finishing.
func opBody(t *testing.T, sess *yamux.Session, name string, epoch uint64, args any, body []byte, cut bool) protocol.Trailer {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw, _ := json.Marshal(args)
	if err := protocol.WriteJSON(st, protocol.Header{Op: name, Epoch: epoch, Args: raw}); err != nil {
		t.Fatal(err)
	}
	answered := make(chan protocol.Trailer, 1)
	go func() {
		var tr protocol.Trailer
		if err := protocol.ReadJSON(st, &tr); err != nil {
			tr.Error = protocol.AsError(err)
		}
		answered <- tr
	}()
	// The runner may answer before taking the body (a refusal); the send then fails or stalls,
	// and the answer is what counts.
	go func() {
		bw := protocol.NewBodyWriter(st)
		if cut {
			_, _ = bw.Write(body[:len(body)/2])
			_ = bw.Abort(errors.New("source went away"))
			return
		}
		if _, err := bw.Write(body); err == nil {
			_, _ = bw.Finish()
		}
	}()
	return <-answered
}

func decodeTrailer(t *testing.T, tr protocol.Trailer, out any) {
	t.Helper()
	if !tr.OK {
		t.Fatalf("operation failed: %+v", tr.Error)
	}
	if err := json.Unmarshal(tr.Result, out); err != nil {
		t.Fatal(err)
	}
}

// Clone from a pack over a session, inspect, reconcile with a pack: the repository Git sees in
// the workspace root follows each step.
func TestGitOpsOverSession(t *testing.T) {
	src, first, second := gitSource(t)
	r, sess := pipeRunner(t)
	root := r.cfg.Root

	// A body cut off half-way publishes nothing.
	args := protocol.GitCheckoutArgs{Strategy: protocol.GitStrategyClone, Branch: "tether/ws", Commit: first, BaseRef: "main", BaseCommit: first}
	tr := opBody(t, sess, protocol.OpGitCheckout, 1, args, packOf(t, src, first), true)
	if tr.OK {
		t.Fatal("a cut body was accepted")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a cut body left %d entries", len(entries))
	}

	var st protocol.GitStatus
	decodeTrailer(t, opBody(t, sess, protocol.OpGitCheckout, 1, args, packOf(t, src, first), false), &st)
	if st.Head != first || st.Branch != "tether/ws" || st.Upstream != "origin/main" || !st.Clean() {
		t.Fatalf("checkout: %+v", st)
	}
	if out := gitFixture(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status:\n%s", out)
	}

	// A second checkout into the now full root is refused before its body.
	tr = opBody(t, sess, protocol.OpGitCheckout, 1, args, packOf(t, src, first), false)
	if tr.OK || tr.Error.Code != protocol.CodeConflict {
		t.Fatalf("checkout into a full root: %+v", tr)
	}

	// Inspect is a read: no epoch needed.
	decodeTrailer(t, op(t, sess, protocol.OpGitInspect, 0, protocol.GitInspectArgs{BaseCommit: first}), &st)
	if st.Head != first || !st.BaseKnown || st.Ahead != 0 || st.Behind != 0 {
		t.Fatalf("inspect: %+v", st)
	}

	// Reconcile: the pack holds what the workspace lacks (second's blob is > 512 KiB: the body
	// spans several chunks).
	var rep protocol.GitReconcileReply
	recArgs := protocol.GitReconcileArgs{BaseRef: "main", Commit: second, HasPack: true}
	decodeTrailer(t, opBody(t, sess, protocol.OpGitReconcile, 1, recArgs, packOf(t, src, second, "^"+first), false), &rep)
	if rep.Action != protocol.GitFastForwarded || rep.Before != first || rep.After != second {
		t.Fatalf("reconcile: %+v", rep)
	}
	if got := gitFixture(t, root, "rev-parse", "HEAD"); got != second {
		t.Fatalf("HEAD is %s", got)
	}
	if out := gitFixture(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status:\n%s", out)
	}
	// No pack this time: the objects are there.
	decodeTrailer(t, op(t, sess, protocol.OpGitReconcile, 1, protocol.GitReconcileArgs{BaseRef: "main", Commit: second}), &rep)
	if rep.Action != protocol.GitUpToDate {
		t.Fatalf("reconcile again: %+v", rep)
	}

	// Mutating git operations are fenced like any other.
	if tr := op(t, sess, protocol.OpSetEpoch, 3, struct{}{}); !tr.OK {
		t.Fatal(tr.Error)
	}
	if tr := op(t, sess, protocol.OpGitReconcile, 2, protocol.GitReconcileArgs{BaseRef: "main", Commit: second}); tr.OK || tr.Error.Code != protocol.CodeStaleEpoch {
		t.Fatalf("stale reconcile: %+v", tr)
	}
}

// A checkout is only ever a repository of the workspace's own, built from a pack: a `git
// worktree add` from a repository elsewhere on the host (what earlier controllers asked of the
// local provider) is refused before anything is read.
func TestGitCheckoutOnlyFromPack(t *testing.T) {
	_, sess := pipeRunner(t)
	tr := op(t, sess, protocol.OpGitCheckout, 1, map[string]string{"strategy": "worktree",
		"base_repo": t.TempDir(), "branch": "ws", "commit": strings.Repeat("a", 40)})
	if tr.OK || tr.Error.Code != protocol.CodeInvalidArgument {
		t.Fatalf("worktree checkout: %+v", tr)
	}
}

func packOf(t *testing.T, dir string, revs ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git binary")
	}
	cmd := exec.Command(bin, "-C", dir, "pack-objects", "--revs", "--stdout", "-q")
	cmd.Stdin = strings.NewReader(strings.Join(revs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pack-objects: %v", err)
	}
	return out
}
