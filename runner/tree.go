package runner

import (
	"time"

	"context"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/tree"
)

// treeImport extracts a tar body into the workspace. tree.Extract stages everything and publishes
// only after the whole stream arrived; the body reader fails on a cut or mismatched body, so a
// broken upload publishes nothing.
func (r *Runner) treeImport(ctx context.Context, st *yamux.Stream, args protocol.TreeImportArgs) (protocol.TreeImportResult, error) {
	root, err := fsguard.Open(r.root, fsguard.WithHolds(r.holds))
	if err != nil {
		return protocol.TreeImportResult{}, err
	}
	defer root.Close()
	stats, err := tree.Extract(ctx, root, protocol.NewBodyReader(st), tree.ExtractOptions{Dir: args.Dir})
	if err != nil {
		return protocol.TreeImportResult{}, err
	}
	return protocol.TreeImportResult{Files: stats.Files, Dirs: stats.Dirs, Symlinks: stats.Symlinks, Bytes: stats.Bytes}, nil
}

// treeExport answers the path's FileInfo (or the refusal) in a first trailer, then streams a tar
// of it as a body, then a final trailer with the counts; a failure half-way (a file changed while it was read)
// aborts the body with its error instead. Everything is read through the guard; tree.Export writes the tar's
// end marker only after the last entry was read whole.
func (r *Runner) treeExport(ctx context.Context, st *yamux.Stream, args protocol.TreeExportArgs) {
	err := r.onRootPath(args.Path, func(root *fsguard.Root, clean string) error {
		fi, err := root.Lstat(clean)
		if err != nil {
			return err
		}
		writeTrailer(st, fileInfo(root, clean, fi), nil)
		// From here on the first trailer is sent: failures go in the final one.
		stopWatch := abandonWatch(st)
		defer stopWatch()
		_ = st.SetWriteDeadline(time.Time{})
		bw := protocol.NewBodyWriter(st)
		stats, err := tree.Export(ctx, root, bw, clean, tree.ExportOptions{Name: args.Name})
		if err != nil {
			_ = bw.Abort(err)
			return nil
		}
		if _, err := bw.Finish(); err != nil {
			return nil
		}
		writeTrailer(st, protocol.TreeExportResult{Files: stats.Files, Dirs: stats.Dirs, Symlinks: stats.Symlinks,
			Bytes: stats.Bytes, Skipped: stats.Skipped, SkippedNames: stats.SkippedNames}, nil)
		return nil
	})
	if err != nil {
		writeTrailer(st, nil, err)
	}
}
