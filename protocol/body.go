package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"io"
)

// A body is the raw payload of an operation, sent as chunks — a 4-byte length, the data, and
// the data's CRC-32C — and closed by an empty chunk plus a JSON frame with the byte count (and
// the sender's SHA-256 of the data, when it computed one). A sender that dies half-way leaves
// no terminator, so the receiver can never mistake a cut stream for a complete one.
//
// Why a CRC and not a SHA-256 of the body (protocol 1): the sender computes both the bytes and
// their digest, so a body digest never proved anything against a hostile sender — what a
// receiver acts on it verifies itself (the controller decodes and hashes every snapshot entry,
// the runner hashes every file it writes, the client hashes what it gets). What the frame has
// to catch is a transport that damages or drops bytes, which a CRC-32C per chunk (hardware on
// amd64 and arm64) does at a fraction of the cost of SHA-256, which took 7 % of a capture's
// runner CPU and was computed twice more at the controller.
const maxBodyChunk = 1 << 20

// castagnoli is the CRC-32C table (read-only once made).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// abortChunk, in place of a chunk length, says the sender gave up; a JSON Error follows. It lets
// a sender that fails half-way (a file changed under a capture) say why, instead of merely
// cutting the stream.
const abortChunk = 0xFFFFFFFF

// BodySum closes a body.
type BodySum struct {
	Bytes int64 `json:"bytes"`
	// SHA256 is the sender's digest of the data, when it hashed it (WithSHA256): a claim the
	// receiver passes on or compares with its own digest, never one the framing checks.
	SHA256 string `json:"sha256,omitempty"`
}

// BodyWriter frames a body onto w. It gathers what it is given into chunks of bodyChunk bytes
// and sends each chunk's length, data and CRC in one write: small writes (a tar header, a zstd
// block) would otherwise each cost a stream frame and a websocket message.
type BodyWriter struct {
	w   io.Writer
	n   int64
	sum hash.Hash // nil unless WithSHA256
	buf []byte    // 4-byte length, then up to bodyChunk bytes of data, then room for the CRC
	hdr [4]byte
}

// bodyChunk is the size of the chunks a BodyWriter sends.
const bodyChunk = 256 << 10

func NewBodyWriter(w io.Writer) *BodyWriter {
	return &BodyWriter{w: w, buf: make([]byte, 4, 4+bodyChunk+4)}
}

// WithSHA256 makes the writer hash the data and send the digest in the terminator (Finish
// returns it too): for a sender that needs the digest itself, such as a file read checked
// against a torn read.
func (b *BodyWriter) WithSHA256() *BodyWriter {
	b.sum = sha256.New()
	return b
}

// room is how much data the current chunk can still take.
func (b *BodyWriter) room() int { return 4 + bodyChunk - len(b.buf) }

func (b *BodyWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), b.room())
		b.buf = append(b.buf, p[:n]...)
		if b.sum != nil {
			b.sum.Write(p[:n])
		}
		b.n += int64(n)
		written += n
		p = p[n:]
		if b.room() == 0 {
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
	b.buf = binary.BigEndian.AppendUint32(b.buf, crc32.Checksum(b.buf[4:], castagnoli))
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:4]
	return err
}

// ReadFrom reads straight into the chunk buffer, saving a copy.
func (b *BodyWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		n, err := r.Read(b.buf[len(b.buf) : 4+bodyChunk])
		if n > 0 {
			data := b.buf[len(b.buf) : len(b.buf)+n]
			if b.sum != nil {
				b.sum.Write(data)
			}
			b.n += int64(n)
			total += int64(n)
			b.buf = b.buf[:len(b.buf)+n]
			if b.room() == 0 {
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
func (b *BodyWriter) Finish() (BodySum, error) { return b.FinishClaiming("") }

// FinishClaiming is Finish with claim as the terminator's SHA-256 (when the writer did not hash
// itself): a relay passing on its own sender's digest, which the receiver checks.
func (b *BodyWriter) FinishClaiming(claim string) (BodySum, error) {
	s := BodySum{Bytes: b.n, SHA256: claim}
	if b.sum != nil {
		s.SHA256 = hex.EncodeToString(b.sum.Sum(nil))
	}
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

// BodyReader reads a framed body; it returns io.EOF only after every chunk matched its CRC and
// the terminator's count matched the bytes actually read.
type BodyReader struct {
	r      io.Reader
	left   int    // data bytes of the current chunk still to read
	crc    uint32 // CRC-32C of the current chunk's data read so far
	inBody bool   // a chunk's data was read and its CRC not yet
	n      int64
	done   bool
	hdr    [4]byte
	Result BodySum // valid after io.EOF; Result.SHA256 is the sender's claim, unchecked
}

func NewBodyReader(r io.Reader) *BodyReader { return &BodyReader{r: r} }

// chunkEnd reads and checks the CRC that closes a chunk.
func (b *BodyReader) chunkEnd() error {
	if _, err := io.ReadFull(b.r, b.hdr[:]); err != nil {
		if CodeOf(err) != CodeInternal {
			return err
		}
		return Errorf(CodeFailed, "body cut off after %d bytes", b.n)
	}
	if got := binary.BigEndian.Uint32(b.hdr[:]); got != b.crc {
		return Errorf(CodeFailed, "body chunk ending at byte %d is damaged: CRC-32C %08x, the sender said %08x", b.n, b.crc, got)
	}
	b.inBody = false
	return nil
}

func (b *BodyReader) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	for b.left == 0 {
		if b.inBody {
			if err := b.chunkEnd(); err != nil {
				return 0, err
			}
		}
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
		b.left, b.crc, b.inBody = int(size), 0, true
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.crc = crc32.Update(b.crc, castagnoli, p[:n])
	b.n += int64(n)
	b.left -= n
	if err == io.EOF {
		if b.left > 0 {
			return n, Errorf(CodeFailed, "body cut off after %d bytes", b.n)
		}
		err = nil
	}
	if err == nil && b.left == 0 {
		// A chunk's CRC is checked before its last bytes are handed out: a damaged chunk ends
		// the body with an error, never with io.EOF.
		if cerr := b.chunkEnd(); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

func (b *BodyReader) finish() error {
	var sp *BodySum
	if err := ReadJSON(b.r, &sp); err != nil {
		return Errorf(CodeFailed, "body terminator: %v", err)
	}
	if sp == nil {
		return Errorf(CodeFailed, "body terminator is not an object")
	}
	s := *sp
	if s.Bytes != b.n {
		return Errorf(CodeFailed, "body mismatch: sender sent %d bytes, received %d", s.Bytes, b.n)
	}
	b.done = true
	b.Result = s
	return io.EOF
}
