// Package ctxio makes long reads stop when their operation is canceled.
package ctxio

import (
	"context"
	"io"
)

// Reader reads from R until Ctx ends; then every Read returns the context's error, so a copy of
// a large body (a pack, a file in an archive) stops at the next chunk.
type Reader struct {
	Ctx context.Context
	R   io.Reader
}

func (c Reader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}
