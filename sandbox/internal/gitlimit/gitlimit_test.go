package gitlimit

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestCaps(t *testing.T) {
	for name, want := range map[string]int64{
		"HEAD": refCap, "ORIG_HEAD": refCap, "refs/heads/main": refCap, "/refs/tags/x": refCap, "commondir": refCap,
		"FETCH_HEAD": defaultCap, "config": configCap, "packed-refs": packedRefsCap, "index": indexCap,
		"objects/pack/p.pack": noCap, "objects/ab/cdef": noCap, "info/exclude": defaultCap, "logs/HEAD": defaultCap,
	} {
		if got := Cap(name); got != want {
			t.Errorf("Cap(%q) = %d; want %d", name, got, want)
		}
	}
}

// A file over its cap is refused at open, and one that grows past it while it is read fails
// its read with too_large instead of being read whole.
func TestLimit(t *testing.T) {
	if _, err := Limit(strings.NewReader(""), "HEAD", 2<<30); protocol.CodeOf(err) != protocol.CodeTooLarge {
		t.Fatalf("2 GiB HEAD at open: %v; want too_large", err)
	}
	if r, err := Limit(strings.NewReader("x"), "objects/pack/p.pack", 1<<40); r != nil || err != nil {
		t.Fatalf("objects: got %v, %v; want no cap", r, err)
	}
	exact := bytes.Repeat([]byte("r"), refCap)
	for _, tc := range []struct {
		name    string
		content []byte
		ok      bool
	}{{"exactly the cap", exact, true}, {"grew past the cap", append(exact, 'x'), false}} {
		r, err := Limit(bytes.NewReader(tc.content), "HEAD", 10)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if tc.ok != (err == nil) || (!tc.ok && protocol.CodeOf(err) != protocol.CodeTooLarge) || int64(len(got)) > refCap {
			t.Errorf("%s: read %d bytes, %v", tc.name, len(got), err)
		}
		r, _ = Limit(bytes.NewReader(tc.content), "HEAD", 10)
		buf := make([]byte, 2*refCap)
		n, err := r.ReadAt(buf, 0)
		if tc.ok != (err == io.EOF) || n > refCap {
			t.Errorf("%s: ReadAt got %d bytes, %v", tc.name, n, err)
		}
	}
}
