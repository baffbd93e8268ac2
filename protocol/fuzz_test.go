package protocol

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzBodyReader feeds arbitrary bytes to a BodyReader. It must never panic, every failure must be
// a typed error, and io.EOF means the bytes read are exactly what the terminator describes.
// Seeds live in testdata/fuzz/FuzzBodyReader; more are added here from the writer.
func FuzzBodyReader(f *testing.F) {
	for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("ab"), 300)} {
		var buf bytes.Buffer
		bw := NewBodyWriter(&buf)
		_, _ = bw.Write(body)
		_, _ = bw.Finish()
		f.Add(buf.Bytes())
		f.Add(buf.Bytes()[:buf.Len()-3])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := NewBodyReader(bytes.NewReader(data))
		var got []byte
		buf := make([]byte, 1+len(data)%97)
		var err error
		for empty := 0; err == nil; {
			var n int
			n, err = br.Read(buf)
			if n == 0 && err == nil {
				if empty++; empty > 100 {
					t.Fatal("Read keeps returning 0, nil")
				}
			}
			if n < 0 || n > len(buf) {
				t.Fatalf("Read returned %d for a %d byte buffer", n, len(buf))
			}
			got = append(got, buf[:n]...)
			if len(got) > len(data) {
				t.Fatalf("read %d bytes out of %d input bytes", len(got), len(data))
			}
		}
		if err != io.EOF {
			if e := (*Error)(nil); !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if br.Result.Bytes != int64(len(got)) {
			t.Fatalf("io.EOF after %d bytes but the terminator says %+v", len(got), br.Result)
		}
		if n, err := br.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Read after EOF = %d, %v", n, err)
		}
	})
}

// TestBodyReaderSeedCorpus keeps the committed seeds honest: the valid_* ones are complete bodies,
// every other one fails, so the fuzzer starts from both sides of the line.
func TestBodyReaderSeedCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzBodyReader/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed corpus: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lit, ok := strings.CutPrefix(strings.TrimSpace(string(raw)), "go test fuzz v1\n[]byte(")
		lit, ok2 := strings.CutSuffix(lit, ")")
		data, err := strconv.Unquote(lit)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a []byte seed: %v", f, err)
		}
		_, rerr := readBody(NewBodyReader(strings.NewReader(data)), 64)
		valid := strings.HasPrefix(filepath.Base(f), "valid_")
		if valid != (rerr == io.EOF) {
			t.Errorf("%s: valid=%v but reading gives %v", f, valid, rerr)
		}
	}
}
