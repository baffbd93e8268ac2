package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// frameBody frames data with a BodyWriter, through Write when viaWrite, else through io.Copy
// (which uses ReadFrom).
func frameBody(t testing.TB, data []byte, viaWrite bool) ([]byte, BodySum) {
	t.Helper()
	var buf bytes.Buffer
	bw := NewBodyWriter(&buf)
	if viaWrite {
		n, err := bw.Write(data)
		if err != nil || n != len(data) {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(data))
		}
	} else {
		// A reader without WriterTo so io.Copy must call ReadFrom.
		n, err := io.Copy(bw, struct{ io.Reader }{bytes.NewReader(data)})
		if err != nil || n != int64(len(data)) {
			t.Fatalf("io.Copy = %d, %v; want %d, nil", n, err, len(data))
		}
	}
	sum, err := bw.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if sum.Bytes != int64(len(data)) || sum.SHA256 != "" {
		t.Fatalf("Finish = %+v; want %d bytes and no sha256", sum, len(data))
	}
	return buf.Bytes(), sum
}

// countingReader counts the bytes handed out by r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// readBody reads br until it returns an error and returns what it read and that error. A reader
// that keeps returning nothing without an error fails with io.ErrNoProgress instead of hanging.
func readBody(br *BodyReader, bufSize int) ([]byte, error) {
	var out []byte
	buf := make([]byte, bufSize)
	for empty := 0; empty < 100; {
		n, err := br.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if n == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	return out, io.ErrNoProgress
}

func TestBodyRoundTrip(t *testing.T) {
	sizes := []struct {
		name string
		n    int
	}{
		{"empty", 0},
		{"one", 1},
		{"chunk+1", maxBodyChunk + 1},
		{"5MiB", 5 << 20},
	}
	wraps := []struct {
		name string
		wrap func(io.Reader) io.Reader
		buf  int
	}{
		{"plain", func(r io.Reader) io.Reader { return r }, 64 << 10},
		{"half", iotest.HalfReader, 100_000},
		// Data and io.EOF arrive together: the last chunk must still count as complete.
		{"dataerr", iotest.DataErrReader, 3 << 20},
	}
	for i, sz := range sizes {
		data := randBytes(uint64(i+1), sz.n)
		for _, viaWrite := range []bool{true, false} {
			framed, sum := frameBody(t, data, viaWrite)
			for _, w := range wraps {
				name := sz.name + "/" + w.name
				if !viaWrite {
					name += "/readfrom"
				}
				t.Run(name, func(t *testing.T) {
					cr := &countingReader{r: bytes.NewReader(framed)}
					br := NewBodyReader(w.wrap(cr))
					got, err := readBody(br, w.buf)
					if err != io.EOF {
						t.Fatalf("final error = %v; want io.EOF", err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("read %d bytes (sha256 %s); want %d bytes (sha256 %s)", len(got), sha(got), len(data), sha(data))
					}
					if cr.n != len(framed) {
						t.Fatalf("io.EOF after consuming %d of %d framed bytes: terminator not verified", cr.n, len(framed))
					}
					if br.Result != sum {
						t.Fatalf("Result = %+v; want %+v", br.Result, sum)
					}
					if n, err := br.Read(make([]byte, 8)); n != 0 || err != io.EOF {
						t.Fatalf("Read after EOF = %d, %v; want 0, io.EOF", n, err)
					}
				})
			}
		}
	}
}

// chunkSizes parses the chunk headers of a framed body.
func chunkSizes(t *testing.T, framed []byte) []int {
	t.Helper()
	var sizes []int
	for {
		if len(framed) < 4 {
			t.Fatalf("framed body ends inside a chunk header")
		}
		n := int(binary.BigEndian.Uint32(framed))
		framed = framed[4:]
		if n == 0 {
			return sizes
		}
		if n+4 > len(framed) {
			t.Fatalf("chunk of %d bytes and its CRC exceed the %d bytes left", n, len(framed))
		}
		sizes = append(sizes, n)
		framed = framed[n+4:]
	}
}

func TestBodyWriterChunksStayWithinLimit(t *testing.T) {
	data := randBytes(7, 5<<20+3)
	for _, viaWrite := range []bool{true, false} {
		framed, _ := frameBody(t, data, viaWrite)
		total := 0
		for _, n := range chunkSizes(t, framed) {
			if n > maxBodyChunk {
				t.Fatalf("writer emitted a %d byte chunk, above the reader's limit %d", n, maxBodyChunk)
			}
			total += n
		}
		if total != len(data) {
			t.Fatalf("chunks hold %d bytes; want %d", total, len(data))
		}
	}
}

// smallFramedBody is a body of two chunks and its terminator, small enough to cut at every offset.
func smallFramedBody(t *testing.T) ([]byte, []byte) {
	t.Helper()
	data := randBytes(42, 30)
	var buf bytes.Buffer
	bw := NewBodyWriter(&buf)
	if _, err := bw.Write(data[:10]); err != nil {
		t.Fatal(err)
	}
	if _, err := bw.Write(data[10:]); err != nil {
		t.Fatal(err)
	}
	if _, err := bw.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), data
}

func TestBodyCutOffIsNeverEOF(t *testing.T) {
	framed, data := smallFramedBody(t)
	// Offsets worth naming; every other offset is cut too.
	endOfData := 4 + 10 + 4 + len(data) - 10
	named := map[int]string{
		0:               "nothing",
		2:               "inside first chunk header",
		4 + 5:           "inside first chunk",
		endOfData:       "right before the terminator",
		endOfData + 2:   "inside the empty chunk header",
		endOfData + 4:   "before the terminator frame",
		endOfData + 6:   "inside the terminator frame length",
		len(framed) - 1: "inside the terminator JSON",
	}
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"plain":   func(r io.Reader) io.Reader { return r },
		"onebyte": iotest.OneByteReader,
		"dataerr": iotest.DataErrReader,
	} {
		for cut := 0; cut < len(framed); cut++ {
			br := NewBodyReader(wrap(bytes.NewReader(framed[:cut])))
			got, err := readBody(br, 7)
			where := named[cut]
			if err == io.EOF || errors.Is(err, io.EOF) {
				t.Fatalf("%s: cut at %d/%d (%s): got io.EOF after %d bytes; a cut body must fail", name, cut, len(framed), where, len(got))
			}
			if CodeOf(err) != CodeFailed {
				t.Fatalf("%s: cut at %d (%s): error %v has code %s; want %s", name, cut, where, err, CodeOf(err), CodeFailed)
			}
			if !bytes.Equal(got, data[:len(got)]) {
				t.Fatalf("%s: cut at %d: returned bytes that were never sent", name, cut)
			}
		}
	}
	if _, ok := named[len(framed)-1]; !ok {
		t.Fatal("named offsets out of range")
	}
}

// framedWithTerminator frames data as one chunk (with its CRC-32C) followed by the given
// terminator.
func framedWithTerminator(t *testing.T, data []byte, term any) []byte {
	return framedWithCRC(t, data, crc32.Checksum(data, castagnoli), term)
}

// framedWithCRC frames data as one chunk closed by crc, followed by the given terminator.
func framedWithCRC(t *testing.T, data []byte, crc uint32, term any) []byte {
	t.Helper()
	var buf bytes.Buffer
	var hdr [4]byte
	if len(data) > 0 {
		binary.BigEndian.PutUint32(hdr[:], uint32(len(data)))
		buf.Write(hdr[:])
		buf.Write(data)
		binary.BigEndian.PutUint32(hdr[:], crc)
		buf.Write(hdr[:])
	}
	binary.BigEndian.PutUint32(hdr[:], 0)
	buf.Write(hdr[:])
	if err := WriteJSON(&buf, term); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBodyTerminatorMismatch(t *testing.T) {
	data := []byte("the quick brown fox")
	good := BodySum{Bytes: int64(len(data))}

	// Sanity: the hand-made framing is accepted when the terminator is right.
	if got, err := readBody(NewBodyReader(bytes.NewReader(framedWithTerminator(t, data, good))), 64); err != io.EOF || !bytes.Equal(got, data) {
		t.Fatalf("good terminator: %q, %v", got, err)
	}
	cases := []struct {
		name string
		body []byte
		term any
	}{
		{"short count", data, BodySum{Bytes: good.Bytes - 1, SHA256: good.SHA256}},
		{"long count", data, BodySum{Bytes: good.Bytes + 1, SHA256: good.SHA256}},
		{"null terminator", data, nil},
		{"empty body claims data", nil, good},
		{"string terminator", data, "not an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readBody(NewBodyReader(bytes.NewReader(framedWithTerminator(t, c.body, c.term))), 64)
			if err == io.EOF || err == nil {
				t.Fatalf("mismatching terminator accepted: %v", err)
			}
			if CodeOf(err) != CodeFailed {
				t.Fatalf("error %v has code %s; want %s", err, CodeOf(err), CodeFailed)
			}
		})
	}
}

func TestBodyOversizeChunkRefused(t *testing.T) {
	for _, size := range []uint32{maxBodyChunk + 1, abortChunk - 1} {
		var buf bytes.Buffer
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], size)
		buf.Write(hdr[:])
		buf.Write(make([]byte, 64)) // some payload, far less than announced
		br := NewBodyReader(&buf)
		n, err := br.Read(make([]byte, 32))
		if err == nil || err == io.EOF {
			t.Fatalf("chunk of %d bytes: Read = %d, %v; want an error", size, n, err)
		}
		if n != 0 {
			t.Fatalf("chunk of %d bytes: Read returned %d bytes of a refused chunk", size, n)
		}
		if CodeOf(err) != CodeInvalidArgument {
			t.Fatalf("chunk of %d bytes: code %s; want %s", size, CodeOf(err), CodeInvalidArgument)
		}
	}
	// The largest allowed chunk is accepted.
	data := randBytes(3, maxBodyChunk)
	got, err := readBody(NewBodyReader(bytes.NewReader(framedWithTerminator(t, data, BodySum{Bytes: int64(len(data)), SHA256: sha(data)}))), 1<<16)
	if err != io.EOF || !bytes.Equal(got, data) {
		t.Fatalf("max-size chunk: %d bytes, %v", len(got), err)
	}
}

// failingWriter fails every write after the first ok ones.
type failingWriter struct{ ok int }

var errWrite = errors.New("write failed")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.ok == 0 {
		return 0, errWrite
	}
	f.ok--
	return len(p), nil
}

func TestBodyWriterReportsWriteErrors(t *testing.T) {
	// A small body takes three writes: its one chunk, the terminator's length, its JSON.
	for ok := range 3 {
		bw := NewBodyWriter(&failingWriter{ok: ok})
		_, err := bw.Write([]byte("abc"))
		if err == nil {
			_, err = bw.Finish()
		}
		if !errors.Is(err, errWrite) {
			t.Fatalf("writer failing after %d writes: error %v; want %v", ok, err, errWrite)
		}
	}
}

func TestBodyAbort(t *testing.T) {
	data := randBytes(11, 3000)
	var buf bytes.Buffer
	bw := NewBodyWriter(&buf)
	if _, err := bw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := bw.Abort(fmt.Errorf("capture: %w", Errorf(CodeChangedDuringCapture, "a.txt changed"))); err != nil {
		t.Fatal(err)
	}
	framed := buf.Bytes()
	got, err := readBody(NewBodyReader(bytes.NewReader(framed)), 1000)
	if err == io.EOF || err == nil {
		t.Fatalf("aborted body ended with %v", err)
	}
	if CodeOf(err) != CodeChangedDuringCapture {
		t.Fatalf("aborted body: %v (code %s); want the sender's code %s", err, CodeOf(err), CodeChangedDuringCapture)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes before the abort; want %d", len(got), len(data))
	}
	// An abort whose reason is cut, malformed or has no code is still a failure, never io.EOF.
	bad := [][]byte{
		framed[:len(framed)-3],
		framedAbort(t, data, `{"code":"x"`),
		framedAbort(t, data, `{"message":"no code"}`),
		framedAbort(t, data, `"just a string"`),
		framedAbort(t, data, `{"code":""}`),
	}
	for i, b := range bad {
		_, err := readBody(NewBodyReader(bytes.NewReader(b)), 1000)
		if err == io.EOF || err == nil {
			t.Fatalf("bad abort %d: %v", i, err)
		}
		if CodeOf(err) != CodeFailed {
			t.Fatalf("bad abort %d: code %s (%v); want %s", i, CodeOf(err), err, CodeFailed)
		}
	}
}

// framedAbort frames data as one chunk followed by an abort whose frame holds reason.
func framedAbort(t *testing.T, data []byte, reason string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := NewBodyWriter(&buf).Write(data); err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], abortChunk)
	buf.Write(hdr[:])
	binary.BigEndian.PutUint32(hdr[:], uint32(len(reason)))
	buf.Write(hdr[:])
	buf.WriteString(reason)
	return buf.Bytes()
}

// Every chunk carries the CRC-32C of its data: a damaged or misframed chunk fails the body
// (code failed) and is never followed by io.EOF.
func TestBodyChunkCRC(t *testing.T) {
	data := []byte("the quick brown fox")
	good := BodySum{Bytes: int64(len(data))}
	crc := crc32.Checksum(data, castagnoli)
	flipped := append([]byte(nil), data...)
	flipped[3] ^= 0x20
	cases := []struct {
		name string
		body []byte
		crc  uint32
	}{
		{"corrupted byte", flipped, crc},
		{"wrong crc", data, crc ^ 1},
		{"zero crc", data, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readBody(NewBodyReader(bytes.NewReader(framedWithCRC(t, c.body, c.crc, good))), 64)
			if err == io.EOF || CodeOf(err) != CodeFailed {
				t.Fatalf("damaged chunk read as %v; want a failed error", err)
			}
		})
	}
	// A chunk cut between its data and its CRC is cut off, not complete.
	whole := framedWithTerminator(t, data, good)
	_, err := readBody(NewBodyReader(bytes.NewReader(whole[:4+len(data)+2])), 64)
	if err == io.EOF || CodeOf(err) != CodeFailed {
		t.Fatalf("chunk cut inside its CRC read as %v", err)
	}
}

// A sender that hashes (WithSHA256) sends its digest in the terminator; the receiver gets it as
// the sender's claim.
func TestBodyWriterWithSHA256(t *testing.T) {
	data := randBytes(9, 3*bodyChunk+17)
	var buf bytes.Buffer
	bw := NewBodyWriter(&buf).WithSHA256()
	if _, err := io.Copy(bw, struct{ io.Reader }{bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	sum, err := bw.Finish()
	if err != nil || sum.SHA256 != sha(data) || sum.Bytes != int64(len(data)) {
		t.Fatalf("Finish = %+v, %v; want %d bytes sha256 %s", sum, err, len(data), sha(data))
	}
	br := NewBodyReader(&buf)
	got, err := readBody(br, 1<<16)
	if err != io.EOF || !bytes.Equal(got, data) || br.Result != sum {
		t.Fatalf("read %d bytes, %v, result %+v; want %+v", len(got), err, br.Result, sum)
	}
}
