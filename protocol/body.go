package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
)

// A body is the raw payload of an operation, sent as length-prefixed chunks and closed by an
// empty chunk plus a JSON frame with the byte count and SHA-256. A sender that dies half-way
// leaves no terminator, so the receiver can never mistake a cut stream for a complete one.
const maxBodyChunk = 1 << 20

// abortChunk, in place of a chunk length, says the sender gave up; a JSON Error follows. It lets
// a sender that fails half-way (a file changed under a capture) say why, instead of merely
// cutting the stream.
const abortChunk = 0xFFFFFFFF

// BodySum closes a body.
type BodySum struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// BodyWriter frames a body onto w. It gathers what it is given into chunks of bodyChunk bytes
// and sends each chunk's length and data in one write: small writes (a tar header, a zstd
// block) would otherwise each cost a stream frame and a websocket message.
type BodyWriter struct {
	w   io.Writer
	n   int64
	sum hash.Hash
	buf []byte // 4-byte length, then up to bodyChunk bytes of data
	hdr [4]byte
}

// bodyChunk is the size of the chunks a BodyWriter sends.
const bodyChunk = 256 << 10

func NewBodyWriter(w io.Writer) *BodyWriter {
	return &BodyWriter{w: w, sum: sha256.New(), buf: make([]byte, 4, 4+bodyChunk)}
}

func (b *BodyWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), cap(b.buf)-len(b.buf))
		b.buf = append(b.buf, p[:n]...)
		b.sum.Write(p[:n])
		b.n += int64(n)
		written += n
		p = p[n:]
		if len(b.buf) == cap(b.buf) {
			if err := b.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush sends the gathered data as one chunk.
func (b *BodyWriter) flush() error {
	if len(b.buf) == 4 {
		return nil
	}
	binary.BigEndian.PutUint32(b.buf[:4], uint32(len(b.buf)-4))
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:4]
	return err
}

// ReadFrom reads straight into the chunk buffer, saving a copy.
func (b *BodyWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		n, err := r.Read(b.buf[len(b.buf):cap(b.buf)])
		if n > 0 {
			data := b.buf[len(b.buf) : len(b.buf)+n]
			b.sum.Write(data)
			b.n += int64(n)
			total += int64(n)
			b.buf = b.buf[:len(b.buf)+n]
			if len(b.buf) == cap(b.buf) {
				if ferr := b.flush(); ferr != nil {
					return total, ferr
				}
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Finish writes the terminator and returns what was sent.
func (b *BodyWriter) Finish() (BodySum, error) {
	s := BodySum{Bytes: b.n, SHA256: hex.EncodeToString(b.sum.Sum(nil))}
	if err := b.flush(); err != nil {
		return s, err
	}
	binary.BigEndian.PutUint32(b.hdr[:], 0)
	if _, err := b.w.Write(b.hdr[:]); err != nil {
		return s, err
	}
	return s, WriteJSON(b.w, s)
}

// Abort ends the body as failed with err; the reader returns err instead of io.EOF.
func (b *BodyWriter) Abort(err error) error {
	if ferr := b.flush(); ferr != nil {
		return ferr
	}
	binary.BigEndian.PutUint32(b.hdr[:], abortChunk)
	if _, werr := b.w.Write(b.hdr[:]); werr != nil {
		return werr
	}
	return WriteJSON(b.w, AsError(err))
}

// BodyReader reads a framed body; it returns io.EOF only after the terminator arrived and matched
// the bytes actually read.
type BodyReader struct {
	r      io.Reader
	left   int
	n      int64
	sum    hash.Hash
	done   bool
	hdr    [4]byte
	Result BodySum // valid after io.EOF
}

func NewBodyReader(r io.Reader) *BodyReader { return &BodyReader{r: r, sum: sha256.New()} }

func (b *BodyReader) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	for b.left == 0 {
		if _, err := io.ReadFull(b.r, b.hdr[:]); err != nil {
			if CodeOf(err) != CodeInternal {
				return 0, err // the reader's own typed reason (a timeout, a limit)
			}
			return 0, Errorf(CodeFailed, "body cut off after %d bytes", b.n)
		}
		size := binary.BigEndian.Uint32(b.hdr[:])
		if size == abortChunk {
			var e Error
			if err := ReadJSON(b.r, &e); err != nil || e.Code == "" {
				return 0, Errorf(CodeFailed, "sender aborted the body after %d bytes", b.n)
			}
			return 0, &e
		}
		if size > maxBodyChunk {
			return 0, Errorf(CodeInvalidArgument, "body chunk of %d bytes exceeds %d", size, maxBodyChunk)
		}
		if size == 0 {
			return 0, b.finish()
		}
		b.left = int(size)
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.sum.Write(p[:n])
	b.n += int64(n)
	b.left -= n
	if err == io.EOF {
		if b.left > 0 {
			return n, Errorf(CodeFailed, "body cut off after %d bytes", b.n)
		}
		err = nil
	}
	return n, err
}

func (b *BodyReader) finish() error {
	var s BodySum
	if err := ReadJSON(b.r, &s); err != nil {
		return Errorf(CodeFailed, "body terminator: %v", err)
	}
	got := hex.EncodeToString(b.sum.Sum(nil))
	if s.Bytes != b.n || s.SHA256 != got {
		return Errorf(CodeFailed, "body mismatch: sender sent %d bytes sha256 %s, received %d bytes sha256 %s",
			s.Bytes, s.SHA256, b.n, got)
	}
	b.done = true
	b.Result = s
	return io.EOF
}
