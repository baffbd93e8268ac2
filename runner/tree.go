package runner

import (
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
