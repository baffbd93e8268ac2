package tree

import (
	"context"
	"fmt"
	"io"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/staging"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// StagePrefix starts the name of Extract's staging directories. A listing
// or snapshot may skip such names: they are never a finished tree.
const StagePrefix = staging.Prefix

// stage is a fresh directory inside the target that receives a whole
// stream before any of it is published.
type stage struct {
	*staging.Stage
	only string // ExtractOptions.Only
}

func newStage(target *fsguard.Root) (*stage, error) {
	s, err := staging.New(target)
	if err != nil {
		return nil, err
	}
	return &stage{Stage: s}, nil
}

// fill reads the whole stream into the staging directory.
func (s *stage) fill(ctx context.Context, r io.Reader, maxBytes int64) (Stats, error) {
	src, err := tarstream.Decompress(r)
	if err != nil {
		return Stats{}, err
	}
	defer src.Close()
	var stats Stats
	tr := tarstream.NewReader(src)
	for {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Stats{}, err
		}
		if err := s.extractEntry(ctx, tr, h, &stats, maxBytes); err != nil {
			return Stats{}, fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
	if err := src.Finish(ctx, -1); err != nil {
		return Stats{}, err
	}
	return stats, nil
}
