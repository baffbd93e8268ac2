package metrics

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/tetherhq/tether/controller/blob"
)

// CountBlobErrors wraps a blob store so that every call the store itself failed counts in
// BlobErrors by operation. What is not the store's failure is not counted: a key that is not
// there, a call canceled or timed out by its caller, a key refused as invalid, and a Put whose
// source failed (a runner's capture that broke off).
func (m *Metrics) CountBlobErrors(s blob.Store) blob.Store { return &countedBlobs{Store: s, m: m} }

type countedBlobs struct {
	blob.Store
	m *Metrics
}

func (c *countedBlobs) count(ctx context.Context, op string, err error) {
	if err == nil || ctx.Err() != nil || blob.IsNotFound(err) {
		return
	}
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		switch coded.ErrorCode() {
		case blob.CodeCanceled, blob.CodeInvalidArgument:
			return
		}
	}
	c.m.blobErrors.WithLabelValues(op).Inc()
}

// source remembers whether the reader handed to Put failed on its own.
type source struct {
	io.Reader
	failed bool
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.Reader.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.failed = true
	}
	return n, err
}

func (c *countedBlobs) Put(ctx context.Context, key string, r io.Reader, want string) (blob.Info, error) {
	src := &source{Reader: r}
	info, err := c.Store.Put(ctx, key, src, want)
	if !src.failed {
		c.count(ctx, "put", err)
	}
	return info, err
}

func (c *countedBlobs) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	rc, info, err := c.Store.Get(ctx, key)
	c.count(ctx, "get", err)
	return rc, info, err
}

func (c *countedBlobs) Stat(ctx context.Context, key string) (blob.Info, error) {
	info, err := c.Store.Stat(ctx, key)
	c.count(ctx, "stat", err)
	return info, err
}

func (c *countedBlobs) Delete(ctx context.Context, key string) error {
	err := c.Store.Delete(ctx, key)
	c.count(ctx, "delete", err)
	return err
}

func (c *countedBlobs) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	list, err := c.Store.List(ctx, prefix)
	c.count(ctx, "list", err)
	return list, err
}

func (c *countedBlobs) SweepTemporaries(ctx context.Context, olderThan time.Duration, live func(string) bool) (int, error) {
	n, err := c.Store.SweepTemporaries(ctx, olderThan, live)
	c.count(ctx, "sweep", err)
	return n, err
}
