package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

func TestJSONFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	h := Header{Op: OpExec, ID: "id-1", Epoch: 7, Args: json.RawMessage(`{"run_id":"r1","argv":["echo","hi"]}`)}
	tr := Trailer{OK: true, Bytes: 12, SHA256: sha([]byte("x")), Result: json.RawMessage(`{"files":3}`)}
	if err := WriteJSON(&buf, h); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, tr); err != nil {
		t.Fatal(err)
	}
	// Frames are self-delimiting: reading one never eats into the next, even byte by byte.
	r := iotest.OneByteReader(&buf)
	var h2 Header
	if err := ReadJSON(r, &h2); err != nil {
		t.Fatal(err)
	}
	var tr2 Trailer
	if err := ReadJSON(r, &tr2); err != nil {
		t.Fatal(err)
	}
	if h2.Op != h.Op || h2.ID != h.ID || h2.Epoch != h.Epoch || !bytes.Equal(h2.Args, h.Args) {
		t.Fatalf("header = %+v; want %+v", h2, h)
	}
	if !tr2.OK || tr2.Bytes != tr.Bytes || tr2.SHA256 != tr.SHA256 || !bytes.Equal(tr2.Result, tr.Result) || tr2.Err() != nil {
		t.Fatalf("trailer = %+v; want %+v", tr2, tr)
	}
	var extra Header
	if err := ReadJSON(r, &extra); err != io.EOF {
		t.Fatalf("reading past the last frame: %v; want io.EOF", err)
	}
}

func TestTrailerErr(t *testing.T) {
	e := Errorf(CodeStaleEpoch, "epoch 3 < 4")
	if err := (&Trailer{Error: e}).Err(); CodeOf(err) != CodeStaleEpoch {
		t.Fatalf("Err = %v", err)
	}
	// A trailer that is neither ok nor carries an error is a failure, not a success.
	if err := (&Trailer{}).Err(); err == nil || CodeOf(err) != CodeInternal {
		t.Fatalf("empty trailer Err = %v; want an internal error", err)
	}
}

func TestWriteJSONRefusesOversizeFrame(t *testing.T) {
	var buf bytes.Buffer
	err := WriteJSON(&buf, map[string]string{"x": strings.Repeat("a", MaxFrame)})
	if err == nil {
		t.Fatal("oversize frame written")
	}
	if buf.Len() != 0 {
		t.Fatalf("refused frame still wrote %d bytes", buf.Len())
	}
	// Just under the limit is fine.
	if err := WriteJSON(&buf, strings.Repeat("a", MaxFrame-2)); err != nil {
		t.Fatalf("frame of exactly MaxFrame bytes: %v", err)
	}
	var s string
	if err := ReadJSON(&buf, &s); err != nil || len(s) != MaxFrame-2 {
		t.Fatalf("ReadJSON of a MaxFrame frame: %d bytes, %v", len(s), err)
	}
}

// endless yields zero bytes forever; a reader that trusted a huge length would read it all.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n += len(p)
	return len(p), nil
}

// A frame that announces the largest size and then sends almost nothing must not cost the
// announced size: a hostile runner opening many such streams would otherwise pin that much memory
// per stream.
func TestReadJSONAllocatesOnlyWhatArrives(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrame)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 8 {
		var v any
		err := ReadJSON(io.MultiReader(bytes.NewReader(hdr[:]), strings.NewReader(`{"op":"`)), &v)
		if err == nil {
			t.Fatal("a cut frame was accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > MaxFrame {
		t.Fatalf("8 frames announcing %d bytes and sending 7 allocated %d bytes", MaxFrame, got)
	}
}

// A frame larger than the caller's limit is refused before its payload is read.
func TestReadJSONLimit(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, strings.Repeat("x", 100)); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := ReadJSONLimit(bytes.NewReader(buf.Bytes()), &v, 64); CodeOf(err) != CodeTooLarge {
		t.Fatalf("a 102-byte frame under a 64-byte limit: %v, want too_large", err)
	}
	if err := ReadJSONLimit(bytes.NewReader(buf.Bytes()), &v, 200); err != nil || len(v) != 100 {
		t.Fatalf("a 102-byte frame under a 200-byte limit: %v", err)
	}
}

func TestReadJSONRefusesOversizeFrame(t *testing.T) {
	for _, size := range []uint32{MaxFrame + 1, 1<<32 - 1} {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], size)
		src := &endless{}
		var v any
		err := ReadJSON(io.MultiReader(bytes.NewReader(hdr[:]), src), &v)
		if err == nil {
			t.Fatalf("frame of %d bytes accepted", size)
		}
		if CodeOf(err) != CodeTooLarge {
			t.Fatalf("frame of %d bytes: code %s (%v); want %s", size, CodeOf(err), err, CodeTooLarge)
		}
		if src.n != 0 {
			t.Fatalf("frame of %d bytes: read %d payload bytes before refusing", size, src.n)
		}
	}
}

func TestReadJSONTruncated(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Hello{ProtocolMin: 1, ProtocolMax: 1, AllocationID: "al_1", Capabilities: []string{"exec"}}); err != nil {
		t.Fatal(err)
	}
	framed := buf.Bytes()
	for cut := 1; cut < len(framed); cut++ {
		var h Hello
		err := ReadJSON(bytes.NewReader(framed[:cut]), &h)
		if err == nil || err == io.EOF {
			t.Fatalf("frame cut at %d/%d: error %v; want a truncation error", cut, len(framed), err)
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("frame cut at %d: %v; want io.ErrUnexpectedEOF", cut, err)
		}
	}
	// Bytes that are not JSON are a typed error.
	var bad bytes.Buffer
	binary.Write(&bad, binary.BigEndian, uint32(3))
	bad.WriteString("{x}")
	var v any
	if err := ReadJSON(&bad, &v); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("malformed JSON: %v; want %s", err, CodeInvalidArgument)
	}
}

// TestChannelWriterConcurrentOrder has two goroutines write numbered chunks on their own channel
// into one pipe; every channel's bytes must come out whole and in order.
func TestChannelWriterConcurrentOrder(t *testing.T) {
	pr, pw := io.Pipe()
	cw := NewChannelWriter(pw)
	const chunks = 400
	channels := []Channel{ChanStdout, ChanStderr}
	want := map[Channel][]byte{}
	payloads := map[Channel][][]byte{}
	for i, ch := range channels {
		for n := range chunks {
			size := 1 + (n*37)%2000
			if n%100 == 7 {
				size = MaxChannelFrame + 1 + n // split in two frames
			}
			p := randBytes(uint64(i*chunks+n+1), size)
			p = append(fmt.Appendf(nil, "<%d:%d>", ch, n), p...)
			payloads[ch] = append(payloads[ch], p)
			want[ch] = append(want[ch], p...)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(channels))
	for _, ch := range channels {
		wg.Go(func() {
			for n, p := range payloads[ch] {
				var err error
				if n%2 == 0 {
					err = cw.WriteFrame(ch, p)
				} else {
					_, err = cw.Writer(ch).Write(p)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		pw.Close()
	}()
	got := map[Channel][]byte{}
	buf := make([]byte, 0, 64<<10)
	for {
		ch, p, err := ReadFrame(pr, buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadFrame: %v", err)
		}
		if len(p) > MaxChannelFrame {
			t.Fatalf("frame of %d bytes exceeds MaxChannelFrame", len(p))
		}
		if ch != ChanStdout && ch != ChanStderr {
			t.Fatalf("frame on unexpected channel %d: the stream is corrupt", ch)
		}
		got[ch] = append(got[ch], p...)
		buf = p
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, ch := range channels {
		if !bytes.Equal(got[ch], want[ch]) {
			i := 0
			for i < len(got[ch]) && i < len(want[ch]) && got[ch][i] == want[ch][i] {
				i++
			}
			t.Fatalf("channel %d: got %d bytes, want %d; first difference at %d", ch, len(got[ch]), len(want[ch]), i)
		}
	}
}

func TestChannelWriterSplitsLargeFrames(t *testing.T) {
	var buf bytes.Buffer
	cw := NewChannelWriter(&buf)
	data := randBytes(9, 2*MaxChannelFrame+MaxChannelFrame/2)
	if err := cw.WriteFrame(ChanStdout, data); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var got []byte
	for {
		ch, p, err := ReadFrame(&buf, nil)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch != ChanStdout {
			t.Fatalf("channel %d; want stdout", ch)
		}
		sizes = append(sizes, len(p))
		got = append(got, p...)
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{MaxChannelFrame, MaxChannelFrame, MaxChannelFrame / 2}) {
		t.Fatalf("frame sizes %v", sizes)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("split frames do not reassemble the payload")
	}
}

func TestChannelEmptyFrames(t *testing.T) {
	var buf bytes.Buffer
	cw := NewChannelWriter(&buf)
	// An empty WriteFrame is a real frame: on stdin it means EOF.
	if err := cw.WriteFrame(ChanStdin, nil); err != nil {
		t.Fatal(err)
	}
	ch, p, err := ReadFrame(&buf, nil)
	if err != nil || ch != ChanStdin || len(p) != 0 {
		t.Fatalf("empty frame read as %d, %q, %v", ch, p, err)
	}
	// An empty Write through the io.Writer sends nothing, so it can never be taken for EOF.
	if n, err := cw.Writer(ChanStdin).Write(nil); n != 0 || err != nil {
		t.Fatalf("empty Write = %d, %v", n, err)
	}
	if buf.Len() != 0 {
		t.Fatalf("empty Write sent %d bytes", buf.Len())
	}
	// JSON frames decode.
	if err := cw.WriteJSONFrame(ChanExit, ExecExit{ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	ch, p, err = ReadFrame(&buf, nil)
	var exit ExecExit
	if err != nil || ch != ChanExit || json.Unmarshal(p, &exit) != nil || exit.ExitCode != 3 {
		t.Fatalf("JSON frame read as %d, %q, %v", ch, p, err)
	}
}

func TestReadFrameRefusesOversizeAndTruncated(t *testing.T) {
	var hdr [5]byte
	hdr[0] = byte(ChanStdout)
	binary.BigEndian.PutUint32(hdr[1:], MaxChannelFrame+1)
	src := &endless{}
	if _, _, err := ReadFrame(io.MultiReader(bytes.NewReader(hdr[:]), src), nil); err == nil {
		t.Fatal("oversize channel frame accepted")
	}
	if src.n != 0 {
		t.Fatalf("read %d payload bytes of a refused frame", src.n)
	}

	var buf bytes.Buffer
	if err := NewChannelWriter(&buf).WriteFrame(ChanStderr, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	framed := buf.Bytes()
	for cut := 1; cut < len(framed); cut++ {
		_, _, err := ReadFrame(bytes.NewReader(framed[:cut]), nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("frame cut at %d: %v; want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestNegotiate(t *testing.T) {
	cases := []struct {
		min, max int
		want     int // 0: no common version
	}{
		{ProtocolMin, ProtocolMax, ProtocolMax},
		{ProtocolMin - 1, ProtocolMax + 5, ProtocolMax},
		{ProtocolMin, ProtocolMax + 1, ProtocolMax},
		{0, ProtocolMin, ProtocolMin},
		{ProtocolMax, ProtocolMax, ProtocolMax},
		{ProtocolMax + 1, ProtocolMax + 2, 0},
		{99, 100, 0},
		{ProtocolMin - 2, ProtocolMin - 1, 0},
		{ProtocolMax, ProtocolMin - 1, 0}, // inverted
	}
	for _, c := range cases {
		v, err := Negotiate(c.min, c.max)
		if c.want == 0 {
			if err == nil {
				t.Errorf("Negotiate(%d, %d) = %d; want no common version", c.min, c.max, v)
			} else if CodeOf(err) != CodeUnsupported {
				t.Errorf("Negotiate(%d, %d): code %s; want %s", c.min, c.max, CodeOf(err), CodeUnsupported)
			}
			continue
		}
		if err != nil || v != c.want {
			t.Errorf("Negotiate(%d, %d) = %d, %v; want %d", c.min, c.max, v, err, c.want)
		}
	}
}
