package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultRetryFor is how long a client keeps retrying a call the controller could not take
// (unavailable, or no connection): long enough to ride out a controller's restart or a peer
// taking over its runners, short enough that a controller that is really down is said soon.
const DefaultRetryFor = 5 * time.Second

// The backoff between attempts grows from retryFirst, doubling, up to retryMax; each wait is
// jittered so that clients turned away together do not all come back together.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = time.Second
)

// retryPolicy is when a call is sent again. A call is retried only when doing so cannot do
// anything twice:
//   - the connection was never made (the dial was refused): nothing reached the controller, so
//     any call is retried;
//   - the controller answered unavailable (503), or the connection was reset or closed before
//     any answer: the call may have arrived, so only an idempotent one is retried (GET, HEAD,
//     PUT, DELETE, a POST marked idempotent or carrying an Idempotency-Key);
//
// and only while its body can be sent again (see replayBody), for at most For in all (measured
// on clock, waits included) and never past the call's context.
type retryPolicy struct {
	For   time.Duration // 0: never retry
	clock clockwork.Clock
}

// WithRetryFor returns a client that retries calls for at most d (0: never); see retryPolicy.
func (c *Client) WithRetryFor(d time.Duration) *Client {
	cc := *c
	cc.retry.For = max(d, 0)
	return &cc
}

// withClock returns a client whose retry waits run on clock (tests use a fake one).
func (c *Client) withClock(clock clockwork.Clock) *Client {
	cc := *c
	cc.retry.clock = clock
	return &cc
}

// withRetries makes attempts of one call until one succeeds, one fails for good (attempt says
// whether its failure may be retried), the retry budget is spent (the last failure is returned)
// or ctx ends (its error is).
func (c *Client) withRetries(ctx context.Context, attempt func() (retry bool, err error)) error {
	var wait *backoff
	for {
		again, err := attempt()
		if err == nil || !again {
			return err
		}
		if wait == nil {
			wait = c.retry.start()
		}
		if werr := wait.next(ctx); werr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// backoff is the retry state of one call.
type backoff struct {
	clock    clockwork.Clock
	deadline time.Time
	delay    time.Duration // the next wait before jitter
}

// errRetryBudget ends a call's retries: its RetryFor is spent (or retries are off).
var errRetryBudget = errors.New("retry budget spent")

// start begins the retries of a call that has just failed once.
func (p retryPolicy) start() *backoff {
	clock := p.clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &backoff{clock: clock, deadline: clock.Now().Add(p.For), delay: retryFirst}
}

// next waits before the next attempt: errRetryBudget when none may be made (the budget is
// spent), ctx's error when it ended meanwhile. The last wait is cut to what the budget has left,
// so that the final attempt is made when the budget ends rather than not at all.
func (b *backoff) next(ctx context.Context) error {
	left := b.deadline.Sub(b.clock.Now())
	if left <= 0 {
		return errRetryBudget
	}
	// Equal jitter: at least half the step, so waits still grow, at most the whole step.
	d := b.delay/2 + rand.N(b.delay/2+1)
	b.delay = min(2*b.delay, retryMax)
	t := b.clock.NewTimer(min(d, left))
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryableConnError says whether a call that failed with err, without any answer, may be sent
// again: always when the connection was refused (nothing was sent), and when it was reset or
// closed before an answer only if the call may be repeated. Anything else (a name that does not
// resolve, a TLS failure) will not mend in a few seconds.
func retryableConnError(err error, mayRepeat bool) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		var op *net.OpError
		return mayRepeat || (errors.As(err, &op) && op.Op == "dial")
	}
	if !mayRepeat {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// replayBody hands each attempt of a call its body and says whether another attempt can have
// one. A body in memory (bytes, strings) and a file (io.ReaderAt with io.Seeker) are read anew
// for every attempt. Any other reader is a stream: its bytes go once, so
// an attempt after one that read from it is impossible.
type replayBody struct {
	memory []byte // a body in memory
	inMem  bool
	file   io.ReaderAt
	start  int64 // where the file's body begins
	size   int64 // the file body's length
	stream io.Reader
	last   *streamBody // the stream as the last attempt got it
}

func newReplayBody(r io.Reader, contentLength int64) *replayBody {
	switch v := r.(type) {
	case nil:
		return &replayBody{}
	case *bytes.Buffer:
		return &replayBody{memory: v.Bytes(), inMem: true}
	case *bytes.Reader, *strings.Reader:
		// What is left of it, read once: every attempt then gets a reader of its own.
		b, _ := io.ReadAll(r)
		return &replayBody{memory: b, inMem: true}
	case interface {
		io.ReaderAt
		io.Seeker
	}:
		if f, ok := r.(*os.File); ok {
			// Only a regular file is read again as it was: a device may seek fine and read
			// differently every time.
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				break
			}
		}
		start, err1 := v.Seek(0, io.SeekCurrent)
		end, err2 := v.Seek(0, io.SeekEnd)
		_, err3 := v.Seek(start, io.SeekStart)
		if err1 == nil && err2 == nil && err3 == nil {
			size := end - start
			if contentLength > 0 {
				size = contentLength
			}
			// Each attempt reads its own section at its own offsets: a transport still reading an
			// abandoned attempt's body cannot move the next attempt's position.
			return &replayBody{file: v, start: start, size: size}
		}
	}
	// Not seekable after all (a pipe), or not a regular file: a stream.
	return &replayBody{stream: r}
}

// attempt is the body of the next attempt.
func (b *replayBody) attempt() io.Reader {
	switch {
	case b.inMem:
		return bytes.NewReader(b.memory)
	case b.file != nil:
		return io.NewSectionReader(b.file, b.start, b.size)
	case b.stream != nil:
		b.last = &streamBody{r: b.stream}
		return b.last
	}
	return nil
}

// replayable says whether another attempt can be sent with the whole body.
func (b *replayBody) replayable() bool {
	if b.stream == nil {
		return true
	}
	return !b.last.seal()
}

// streamBody is one attempt's view of a stream. Once sealed it never reads the stream again, so
// the next attempt may have it; it hides Close, so that a transport closing a failed attempt's
// body does not close the caller's stream under the next attempt.
type streamBody struct {
	r      io.Reader
	mu     sync.Mutex
	read   bool // a Read reached the stream
	sealed bool
}

// errAbandoned ends an abandoned attempt's reads of a stream the next attempt now owns.
var errAbandoned = errors.New("request body: the attempt was abandoned")

func (s *streamBody) Read(p []byte) (int, error) {
	s.mu.Lock()
	if s.sealed {
		s.mu.Unlock()
		return 0, errAbandoned
	}
	s.read = true
	s.mu.Unlock()
	return s.r.Read(p)
}

// seal stops the attempt reading and reports whether it read any of the stream: then the
// stream's start is gone and no other attempt can be made.
func (s *streamBody) seal() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	return s.read
}
