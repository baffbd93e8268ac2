package runner

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitops"
)

// gitLocks serializes the Git operations that write a workspace's repository (two checkouts into
// one empty root would both find it empty). Keyed by root, so runners sharing a process (tests)
// do not wait on each other.
var gitLocks sync.Map // root → *sync.Mutex

func lockGit(root string) func() {
	m, _ := gitLocks.LoadOrStore(root, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// gitRoot is the workspace root as an absolute path, which gitops requires.
func (r *Runner) gitRoot() (string, error) {
	return filepath.Abs(r.root)
}

// gitCheckout fills the empty workspace root with a repository of its own, built from the pack
// in the request body.
func (r *Runner) gitCheckout(ctx context.Context, st *yamux.Stream, args protocol.GitCheckoutArgs) (protocol.GitStatus, error) {
	root, err := r.gitRoot()
	if err != nil {
		return protocol.GitStatus{}, err
	}
	if args.Strategy != protocol.GitStrategyClone {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeInvalidArgument, "checkout strategy %q: want %q", args.Strategy, protocol.GitStrategyClone)
	}
	// Refusals come before the body, so the controller stops sending it at once.
	if err := gitops.CheckClone(root, args); err != nil {
		return protocol.GitStatus{}, err
	}
	pack, done, err := spoolBody(ctx, st, root)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	defer done()
	defer lockGit(root)()
	return gitops.CloneFromPack(ctx, root, pack, args)
}

// gitInspect reads the workspace's repository; it changes nothing, so it takes no lock.
func (r *Runner) gitInspect(ctx context.Context, _ *yamux.Stream, args protocol.GitInspectArgs) (protocol.GitStatus, error) {
	root, err := r.gitRoot()
	if err != nil {
		return protocol.GitStatus{}, err
	}
	return gitops.Inspect(ctx, root, args)
}

// gitBranch moves the repository onto a new branch at its HEAD commit (a fork's own).
func (r *Runner) gitBranch(ctx context.Context, _ *yamux.Stream, args protocol.GitBranchArgs) (protocol.GitStatus, error) {
	root, err := r.gitRoot()
	if err != nil {
		return protocol.GitStatus{}, err
	}
	defer lockGit(root)()
	return gitops.SwitchBranch(ctx, root, args)
}

// gitReconcile takes the base ref's new commit, with a pack body of the objects the workspace may
// lack when args.HasPack.
func (r *Runner) gitReconcile(ctx context.Context, st *yamux.Stream, args protocol.GitReconcileArgs) (protocol.GitReconcileReply, error) {
	root, err := r.gitRoot()
	if err != nil {
		return protocol.GitReconcileReply{}, err
	}
	if err := gitops.CheckReconcile(args); err != nil {
		return protocol.GitReconcileReply{}, err
	}
	var pack io.Reader // a nil *os.File in an io.Reader would not be nil
	if args.HasPack {
		f, done, err := spoolBody(ctx, st, root)
		if err != nil {
			return protocol.GitReconcileReply{}, err
		}
		defer done()
		pack = f
	}
	defer lockGit(root)()
	return gitops.Reconcile(ctx, root, pack, args)
}

// spoolBody copies the request body into a private temporary file outside the workspace and
// returns it rewound, only once the body's terminator arrived and matched (count and SHA-256):
// a pack cut off half-way must never reach the repository, and Git's own pack parser stops at
// the pack's end without reading the terminator that says the sender finished. done removes it.
func spoolBody(ctx context.Context, st io.Reader, root string) (*os.File, func(), error) {
	dir, err := os.MkdirTemp("", "tether-git-")
	if err != nil {
		return nil, nil, err
	}
	done := func() { os.RemoveAll(dir) }
	if rel, err := filepath.Rel(root, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		done()
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "the temporary directory %s lies inside the workspace; set TMPDIR elsewhere", dir)
	}
	f, err := os.OpenFile(filepath.Join(dir, "body"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		done()
		return nil, nil, err
	}
	cleanup := func() { f.Close(); done() }
	// io.Copy ends without error only at the body reader's io.EOF, which comes after the verified
	// terminator; an abort, a cut or a mismatch is an error.
	if _, err := io.Copy(f, &ctxReader{ctx: ctx, r: protocol.NewBodyReader(st)}); err != nil {
		cleanup()
		return nil, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		cleanup()
		return nil, nil, err
	}
	return f, cleanup, nil
}

// ctxReader stops reading a body when the operation is canceled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// gitPack streams a pack of the commits a pull brings to the host: the plan (object count, or
// why there is none) in the first trailer, the pack as the body, its size in the last.
func (r *Runner) gitPack(ctx context.Context, st *yamux.Stream, args protocol.GitPackArgs) {
	root, err := r.gitRoot()
	if err != nil {
		writeTrailer(st, nil, err)
		return
	}
	unlock := lockGit(root)
	plan, err := gitops.PlanPack(ctx, root, args)
	if err != nil {
		unlock()
		writeTrailer(st, nil, err)
		return
	}
	defer plan.Close()
	defer unlock()
	writeTrailer(st, protocol.GitPackInfo{Objects: plan.Objects()}, nil)
	stopWatch := abandonWatch(st)
	defer stopWatch()
	_ = st.SetWriteDeadline(time.Time{})
	bw := protocol.NewBodyWriter(st)
	if err := plan.Write(bw); err != nil {
		_ = bw.Abort(err)
		return
	}
	n, err := bw.Finish()
	if err != nil {
		return
	}
	writeTrailer(st, protocol.GitPackResult{Objects: plan.Objects(), Bytes: n.Bytes}, nil)
}
