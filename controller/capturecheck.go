package controller

// The controller never takes a runner's word for a capture: the archive is decoded as it streams
// past on its way to the blob store (decrypted with the controller's own identity when it is
// encrypted), every entry is checked and hashed and the manifest it ends with is compared to the
// entries actually sent. Only an archive that verifies, and whose manifest names this workspace,
// epoch and parent, gets a receipt; the receipt's figures are the ones computed here.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"filippo.io/age"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// captureCheck verifies the capture stream handed to the blob store. Wrap the body with tee;
// after the store returned, result says whether the archive verified.
type captureCheck struct {
	pw   *io.PipeWriter
	done chan checked
	// ended is set once the store returned, whole once the body's end reached the check; a check
	// that fails when the store stopped short failed for want of input, not because the
	// archive is bad.
	ended, whole atomic.Bool
}

type checked struct {
	v   *snapshot.Verified
	err error
}

// errStoreEnded ends the check when the store stopped reading before the body's end.
var errStoreEnded = errors.New("the blob store stopped reading the capture")

func (s *Server) startCaptureCheck(ctx context.Context, encrypted bool, res *resolver) *captureCheck {
	pr, pw := io.Pipe()
	c := &captureCheck{pw: pw, done: make(chan checked, 1)}
	// The check ends on its own: with the archive's end, or when result closes its input.
	started := s.routines.Go("capture check", func(context.Context) {
		var opts snapshot.VerifyOptions
		if res != nil {
			opts.AllowRefs, opts.OnManifestEntry = res.parent != nil, res.entry
		}
		v, err := s.verifyArchive(ctx, pr, encrypted, opts)
		if err == nil {
			// Whatever follows a complete archive would be stored with it.
			if n, derr := io.Copy(io.Discard, pr); derr != nil {
				err = derr
			} else if n > 0 {
				err = protocol.Errorf(protocol.CodeCorrupt, "%d bytes follow the end of the archive", n)
			}
		}
		if res != nil {
			// The resolved manifest is stored whole only for an archive that verified.
			if err == nil {
				if ferr := res.finish(v); ferr != nil {
					err = ferr
				}
			} else {
				res.abort(err)
			}
		}
		if err != nil {
			// Looked at before the pipe closes: until then the store cannot have stopped because
			// of this check.
			if c.ended.Load() && !c.whole.Load() {
				err = errStoreEnded
			}
			// Fails the tee's next write, so the store stops too and nothing is kept.
			pr.CloseWithError(err)
		}
		c.done <- checked{v, err}
	})
	if !started {
		err := protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
		pr.CloseWithError(err)
		c.done <- checked{nil, err}
	}
	return c
}

// tee passes r through to its reader and into the check; r's end (or failure) ends the check's
// input the same way.
func (c *captureCheck) tee(r io.Reader) io.Reader { return &teeToCheck{r: r, c: c} }

// result waits for the check. Call it once the store returned, whatever it returned.
func (c *captureCheck) result() (*snapshot.Verified, error) {
	c.ended.Store(true)
	c.pw.CloseWithError(errStoreEnded)
	res := <-c.done
	if errors.Is(res.err, errStoreEnded) {
		res.err = protocol.Errorf(protocol.CodeFailed, "the capture was not stored whole")
	}
	return res.v, res.err
}

type teeToCheck struct {
	r io.Reader
	c *captureCheck
}

func (t *teeToCheck) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if _, werr := t.c.pw.Write(p[:n]); werr != nil {
			return 0, werr
		}
	}
	switch {
	case err == io.EOF:
		t.c.whole.Store(true)
		t.c.pw.Close()
	case err != nil:
		t.c.pw.CloseWithError(err)
	}
	return n, err
}

// verifyArchive checks a stored or arriving snapshot object: decrypted when encrypted (an
// object that should be encrypted and is not fails here), then verified entry by entry against
// its manifest, with memory independent of the number of entries.
func (s *Server) verifyArchive(ctx context.Context, r io.Reader, encrypted bool, opts snapshot.VerifyOptions) (*snapshot.Verified, error) {
	plain := r
	if encrypted {
		d, err := age.Decrypt(r, s.identity)
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeCorrupt, "the archive is not encrypted to this controller: %v", err)
		}
		plain = d
	}
	lim := s.cfg.Runners
	opts.MaxEntries, opts.MaxManifestBytes, opts.MaxBytes = lim.MaxManifestEntries, lim.MaxManifestBytes, lim.MaxSnapshotBytes
	v, err := snapshot.Verify(ctx, plain, opts)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return v, nil
}

// matchCapture checks that a verified archive is the capture that was asked for and that the
// runner's summary tells the truth about it, and returns the summary to record: the runner's,
// with every figure replaced by the computed one.
func matchCapture(snap api.Snapshot, v *snapshot.Verified, claimed protocol.SnapshotSummary) (protocol.SnapshotSummary, error) {
	bad := func(format string, args ...any) (protocol.SnapshotSummary, error) {
		return protocol.SnapshotSummary{}, protocol.Errorf(protocol.CodeCorrupt, "capture of workspace %s: %s", snap.WorkspaceID, fmt.Sprintf(format, args...))
	}
	switch {
	case v.WorkspaceID != snap.WorkspaceID:
		return bad("the archive's manifest is of workspace %q", v.WorkspaceID)
	case v.Epoch != snap.Epoch:
		return bad("the archive's manifest is of epoch %d, the capture ran under %d", v.Epoch, snap.Epoch)
	case v.Parent != snap.Parent:
		return bad("the archive's manifest names parent %q, the last receipt is %q", v.Parent, snap.Parent)
	}
	got := protocol.SnapshotSummary{
		Entries: v.Totals.Entries, Files: v.Totals.Files, Dirs: v.Totals.Dirs, Symlinks: v.Totals.Symlinks,
		Bytes: v.Totals.Bytes, Skipped: v.Skipped, Git: v.Git, Parent: v.Parent, Tool: v.ToolVersion,
		Manifest: v.ManifestSHA256, Tree: v.TreeSHA256, Encrypted: snap.Encrypted,
	}
	if len(got.Git) == 0 {
		got.Git = nil
	}
	claimedGit, gotGit := compactJSON(claimed.Git), compactJSON(got.Git)
	if claimed.Entries != got.Entries || claimed.Files != got.Files || claimed.Dirs != got.Dirs ||
		claimed.Symlinks != got.Symlinks || claimed.Bytes != got.Bytes || claimed.Skipped != got.Skipped ||
		claimed.Manifest != got.Manifest || claimed.Tree != got.Tree || claimed.Parent != got.Parent ||
		!bytes.Equal(claimedGit, gotGit) {
		return bad("the runner's summary (%d entries, %d bytes, manifest %s) differs from the archive it sent (%d entries, %d bytes, manifest %s)",
			claimed.Entries, claimed.Bytes, claimed.Manifest, got.Entries, got.Bytes, got.Manifest)
	}
	return got, nil
}

func compactJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// strikeCapture counts a capture the runner spoiled (an archive that does not verify) against
// its budget; a tree too large, or failures of the tree or the store, are not its fault.
func (s *Server) strikeCapture(c *hub.Conn, err error) {
	switch protocol.CodeOf(err) {
	case protocol.CodeCorrupt:
		s.strike(c, err.Error())
	}
}
