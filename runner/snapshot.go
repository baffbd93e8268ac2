package runner

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// snapshotCapture streams the workspace as an archive in the body, encrypted when the
// controller sent a recipient, and ends with the manifest summary. Nothing is staged on the
// sandbox's disk: the archive exists only as it flows. A failure aborts the body with its
// reason, so the controller can never store a partial archive as complete.
func (r *Runner) snapshotCapture(ctx context.Context, st *yamux.Stream, args protocol.SnapshotCaptureArgs) {
	var recipient age.Recipient
	if args.Recipient != "" {
		rc, err := age.ParseX25519Recipient(args.Recipient)
		if err != nil {
			writeTrailer(st, nil, protocol.Errorf(protocol.CodeInvalidArgument, "snapshot recipient: %v", err))
			return
		}
		recipient = rc
	}
	// The reply says the body follows; errors before this point need no body at all.
	writeTrailer(st, struct{}{}, nil)
	stopWatch := abandonWatch(st)
	defer stopWatch()

	body := protocol.NewBodyWriter(st)
	record := r.newCache(args.WorkspaceID, args.SnapshotID, time.Now())
	summary, err := r.capture(ctx, body, recipient, args, record)
	if err != nil {
		record.abort()
		_ = body.Abort(err)
		return
	}
	if _, err := body.Finish(); err != nil {
		record.abort()
		return
	}
	// Sent whole: the next capture may take refs relative to this one (if it gets a receipt;
	// otherwise its parent is another snapshot and the cache goes unused).
	record.commit(r.cfg.Logger, &r.cacheTrees, args.SnapshotID, summary.Tree)
	writeTrailer(st, summary, nil)
}

func (r *Runner) capture(ctx context.Context, body io.Writer, recipient age.Recipient, args protocol.SnapshotCaptureArgs, record *cacheRecord) (protocol.SnapshotSummary, error) {
	var out protocol.SnapshotSummary
	refs := r.refsFor(args)
	defer refs.Close()
	err := r.withRoot(func(root *fsguard.Root) error {
		w := body
		var enc io.WriteCloser
		if recipient != nil {
			var err error
			if enc, err = age.Encrypt(body, recipient); err != nil {
				return err
			}
			w = enc
		}
		m, err := snapshot.Capture(ctx, root, w, snapshot.CaptureOptions{
			WorkspaceID: args.WorkspaceID, Epoch: args.Epoch, Parent: args.Parent,
			ToolVersion: r.cfg.Version, ZstdLevel: args.ZstdLevel, Refs: refs, Record: record.writer(),
		})
		if err != nil {
			return err
		}
		if enc != nil {
			if err := enc.Close(); err != nil {
				return err
			}
		}
		out, err = summarize(m)
		out.Encrypted = recipient != nil
		return err
	})
	return out, err
}

// summarize keeps what the controller records beside a receipt.
func summarize(m *snapshot.Manifest) (protocol.SnapshotSummary, error) {
	// Streamed: marshalling the whole manifest again held it twice at the capture's peak.
	manifest, tree, err := snapshot.ManifestDigests(m)
	if err != nil {
		return protocol.SnapshotSummary{}, err
	}
	s := protocol.SnapshotSummary{
		Tree:    tree,
		Entries: m.Totals.Entries, Files: m.Totals.Files, Dirs: m.Totals.Dirs, Symlinks: m.Totals.Symlinks,
		Bytes: m.Totals.Bytes, Skipped: len(m.Skipped), Parent: m.Parent, Tool: m.ToolVersion,
		Manifest: manifest,
	}
	if m.Git != nil {
		if s.Git, err = json.Marshal(m.Git); err != nil {
			return s, err
		}
	}
	return s, nil
}

// snapshotRestore extracts the archive in the body into the workspace. snapshot.Restore reads
// the body to its verified end before it publishes anything.
func (r *Runner) snapshotRestore(ctx context.Context, st *yamux.Stream, args protocol.SnapshotRestoreArgs) (protocol.SnapshotSummary, error) {
	var out protocol.SnapshotSummary
	err := r.withRoot(func(root *fsguard.Root) error {
		dir := args.Dir
		if dir == "" {
			dir = "."
		}
		var published time.Time
		m, err := snapshot.Restore(ctx, root, protocol.NewBodyReader(st), snapshot.RestoreOptions{
			Dir: dir, MaxEntries: args.MaxEntries, MaxBytes: args.MaxBytes, MaxApparentBytes: args.MaxApparentBytes,
			PublishedAt: &published,
		})
		if err != nil {
			return err
		}
		if dir == "." {
			r.recordRestore(root, args.SnapshotID, m, published)
		}
		out, err = summarize(m)
		return err
	})
	return out, err
}

// treeDigest captures into nothing: the walk, the change checks and the hashes of a capture,
// for the summary alone.
func (r *Runner) treeDigest(ctx context.Context, _ *yamux.Stream, args protocol.SnapshotCaptureArgs) (protocol.SnapshotSummary, error) {
	// Nothing leaves the runner here, so a walk that saw the tree change is simply walked again,
	// as the controller does for a capture.
	var err error
	for range digestAttempts {
		var sum protocol.SnapshotSummary
		if sum, err = r.capture(ctx, io.Discard, nil, args, nil); protocol.CodeOf(err) != protocol.CodeChangedDuringCapture {
			return sum, err
		}
	}
	return protocol.SnapshotSummary{}, err
}

// digestAttempts bounds the walks of one tree_digest whose tree keeps changing.
const digestAttempts = 3
