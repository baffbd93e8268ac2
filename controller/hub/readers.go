package hub

// Readers that bound what a runner sends on an operation stream: a runner is untrusted, so its
// silence and its volume are both limited before anything it sends is buffered or stored.

import (
	"errors"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// IdleReader fails a read that waits more than Idle for the runner's next byte on St.
type IdleReader struct {
	St   *yamux.Stream
	Idle time.Duration
}

func (r IdleReader) Read(p []byte) (int, error) {
	_ = r.St.SetReadDeadline(time.Now().Add(r.Idle))
	n, err := r.St.Read(p)
	if errors.Is(err, yamux.ErrTimeout) {
		err = protocol.Errorf(protocol.CodeTimeout, "the runner sent nothing for %s", r.Idle)
	}
	return n, err
}

// CapReader fails with CodeTooLarge once more than max bytes came through it; what names the
// data in the error.
type CapReader struct {
	r    io.Reader
	n    int64
	max  int64
	what string
}

// NewCapReader bounds r to max bytes.
func NewCapReader(r io.Reader, max int64, what string) *CapReader {
	return &CapReader{r: r, max: max, what: what}
}

func (c *CapReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, protocol.Errorf(protocol.CodeTooLarge, "%s exceeds the %d-byte limit", c.what, c.max)
	}
	return n, err
}
