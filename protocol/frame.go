package protocol

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// MaxFrame bounds one JSON frame (header or trailer). Bulk bytes never travel in frames of this
// kind, so a small limit keeps a hostile peer from making us allocate much.
const MaxFrame = 4 << 20

// Header opens every operation stream.
type Header struct {
	Op    string          `json:"op"`
	ID    string          `json:"id,omitempty"`    // idempotency id for mutating operations
	Epoch uint64          `json:"epoch,omitempty"` // writer epoch (fencing token)
	Args  json.RawMessage `json:"args,omitempty"`
}

// Trailer closes every operation stream. Bytes and SHA256 describe the raw body that was sent,
// so the receiver can verify it got every byte.
type Trailer struct {
	OK     bool            `json:"ok"`
	Error  *Error          `json:"error,omitempty"`
	Bytes  int64           `json:"bytes,omitempty"`
	SHA256 string          `json:"sha256,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Err returns the trailer's error, or nil when the operation succeeded.
func (t *Trailer) Err() error {
	if t.OK {
		return nil
	}
	if t.Error != nil {
		return t.Error
	}
	return Errorf(CodeInternal, "operation failed without an error")
}

// WriteJSON writes v as one length-prefixed (uint32, big endian) JSON frame.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ReadJSON reads one frame written by WriteJSON into v.
func ReadJSON(r io.Reader, v any) error { return ReadJSONLimit(r, v, MaxFrame) }

// ReadJSONLimit is ReadJSON for a frame of at most limit bytes (never more than MaxFrame). The
// frame's buffer grows as its bytes arrive, never to the size it announces: a peer announcing
// large frames and sending none of them costs nothing.
func ReadJSONLimit(r io.Reader, v any, limit int) error {
	limit = min(limit, MaxFrame)
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > uint32(limit) {
		return Errorf(CodeTooLarge, "frame of %d bytes exceeds %d", size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err != nil || len(b) != int(size) {
		return fmt.Errorf("read frame: %w", io.ErrUnexpectedEOF)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return Errorf(CodeInvalidArgument, "decode frame: %v", err)
	}
	return nil
}
