package protocol

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Channel tags a frame of an interactive stream (exec): stdin, stdout and stderr travel as raw
// bytes side by side on one stream, each in its own order, never base64'd.
type Channel byte

const (
	ChanStdin   Channel = 0 // client → runner; an empty frame is EOF
	ChanStdout  Channel = 1
	ChanStderr  Channel = 2
	ChanControl Channel = 3 // client → runner, JSON ExecControl
	ChanExit    Channel = 4 // runner → client, JSON ExecExit, always last
	ChanStarted Channel = 5 // runner → client, JSON ExecStarted
	ChanError   Channel = 6 // controller → CLI, JSON Error, when the exec could not be dispatched
	// ChanGap (runner → client, JSON LogGap) says bytes of a stream the reader asked for are no
	// longer held; the stream's next data frame starts at the gap's To.
	ChanGap Channel = 7
	// ChanLogEnd (runner → client, JSON LogEnd) ends a run_logs stream that does not follow, or
	// follows a run that ended: where each stream stopped, and the exit when the run finished.
	ChanLogEnd Channel = 8
)

// MaxChannelFrame bounds one channel frame's payload.
const MaxChannelFrame = 1 << 20

// ChannelWriter writes tagged frames; it is safe for concurrent use so stdout and stderr pumps can
// share one stream.
type ChannelWriter struct {
	mu  sync.Mutex
	w   io.Writer
	hdr [5]byte
}

func NewChannelWriter(w io.Writer) *ChannelWriter { return &ChannelWriter{w: w} }

// WriteFrame writes one frame. Payloads above MaxChannelFrame are split.
func (cw *ChannelWriter) WriteFrame(ch Channel, p []byte) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for {
		n := min(len(p), MaxChannelFrame)
		cw.hdr[0] = byte(ch)
		binary.BigEndian.PutUint32(cw.hdr[1:], uint32(n))
		if _, err := cw.w.Write(cw.hdr[:]); err != nil {
			return err
		}
		if n > 0 {
			if _, err := cw.w.Write(p[:n]); err != nil {
				return err
			}
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// WriteJSONFrame writes v encoded as JSON on ch.
func (cw *ChannelWriter) WriteJSONFrame(ch Channel, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return cw.WriteFrame(ch, b)
}

// Writer returns an io.Writer that frames everything written to it on ch.
func (cw *ChannelWriter) Writer(ch Channel) io.Writer { return channelSink{cw, ch} }

type channelSink struct {
	cw *ChannelWriter
	ch Channel
}

func (s channelSink) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.cw.WriteFrame(s.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrame reads one frame into buf (grown when needed) and returns its channel and payload.
func ReadFrame(r io.Reader, buf []byte) (Channel, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxChannelFrame {
		return 0, nil, fmt.Errorf("channel frame of %d bytes exceeds %d", n, MaxChannelFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return Channel(hdr[0]), buf, nil
}
