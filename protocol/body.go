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

// BodyWriter frames a body onto w.
type BodyWriter struct {
	w   io.Writer
	n   int64
	sum hash.Hash
	hdr [4]byte
}

func NewBodyWriter(w io.Writer) *BodyWriter { return &BodyWriter{w: w, sum: sha256.New()} }

func (b *BodyWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), maxBodyChunk)
		binary.BigEndian.PutUint32(b.hdr[:], uint32(n))
		if _, err := b.w.Write(b.hdr[:]); err != nil {
			return written, err
		}
		if _, err := b.w.Write(p[:n]); err != nil {
			return written, err
		}
		b.sum.Write(p[:n])
		b.n += int64(n)
		written += n
		p = p[n:]
	}
	return written, nil
}

// ReadFrom lets io.Copy hand us large buffers, so chunks stay big.
func (b *BodyWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := b.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
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
	binary.BigEndian.PutUint32(b.hdr[:], 0)
	if _, err := b.w.Write(b.hdr[:]); err != nil {
		return s, err
	}
	return s, WriteJSON(b.w, s)
}

// Abort ends the body as failed with err; the reader returns err instead of io.EOF.
func (b *BodyWriter) Abort(err error) error {
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
