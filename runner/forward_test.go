package runner

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// A dialed port carries bytes both ways, exactly, and half-closes travel: the server sees EOF
// when the controller closes its half, and its answer after that still arrives whole.
func TestTCPDialCarriesBytesAndHalfCloses(t *testing.T) {
	_, sess := pipeRunner(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		// Read everything until the client's FIN, then answer with its digest and length.
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil {
			served <- err
			return
		}
		w := bufio.NewWriter(c)
		_, _ = w.Write(h.Sum(nil))
		_, _ = w.WriteString(strconv.FormatInt(n, 10))
		served <- w.Flush()
	}()

	port := l.Addr().(*net.TCPAddr).Port
	st := openOp(t, sess, protocol.OpTCPDial, protocol.TCPDialArgs{Port: port})
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil || !tr.OK {
		t.Fatalf("dial answer %+v: %v", tr, err)
	}
	payload := bytes.Repeat([]byte("tether forwards bytes. "), 200_000) // 4.6 MB, many windows
	if _, err := st.Write(payload); err != nil {
		t.Fatal(err)
	}
	st.Close() // the half-close: the server's read ends, its answer still comes
	answer, err := io.ReadAll(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	want := append(sum[:], strconv.Itoa(len(payload))...)
	if !bytes.Equal(answer, want) {
		t.Fatalf("answer %x, want %x", answer, want)
	}
}

// Nothing listening, or a port out of range, is refused with a typed error and no bytes.
func TestTCPDialRefusals(t *testing.T) {
	_, sess := pipeRunner(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	for _, c := range []struct {
		port int
		code protocol.Code
	}{{closed, protocol.CodeUnavailable}, {0, protocol.CodeInvalidArgument}, {70000, protocol.CodeInvalidArgument}} {
		st := openOp(t, sess, protocol.OpTCPDial, protocol.TCPDialArgs{Port: c.port})
		var tr protocol.Trailer
		if err := protocol.ReadJSON(st, &tr); err != nil {
			t.Fatal(err)
		}
		if tr.OK || protocol.CodeOf(tr.Err()) != c.code {
			t.Errorf("port %d: trailer %+v, want %s", c.port, tr, c.code)
		}
		if rest, _ := io.ReadAll(st); len(rest) != 0 {
			t.Errorf("port %d: %d bytes after the refusal", c.port, len(rest))
		}
	}
}
