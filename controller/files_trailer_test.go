package controller

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// trailingDigest: a runner that checks trailing digests is asked to; for one that cannot, the
// controller checks the bytes it relays and fails the claim on a mismatch (so the body is
// aborted and nothing published); a digest declared on a body that cannot carry trailers is
// refused rather than ignored.
func TestTrailingDigest(t *testing.T) {
	data := bytes.Repeat([]byte("relayed "), 100_000)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	type outcome struct {
		err, claimErr error
		claimed       string
		flagged       bool
		relayed       int
	}
	var got outcome
	var caps []string
	outcomes := make(chan outcome, 1) // the handler's, handed over (the network is no sync the race detector sees)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got outcome
		defer func() { outcomes <- got }()
		args := protocol.FsWriteArgs{}
		var caps []string // the test's, sent along with the request
		if c := r.Header.Get("X-Test-Caps"); c != "" {
			caps = []string{c}
		}
		src, claim, err := trailingDigest(r, &hub.Conn{Hello: protocol.Hello{Capabilities: caps}}, &args)
		got.err, got.flagged = err, args.SHA256Trailer
		if err == nil {
			n, _ := io.Copy(io.Discard, src)
			got.relayed = int(n)
			if claim != nil {
				got.claimed, got.claimErr = claim()
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	put := func(trailer string, chunked bool) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			t.Fatal(err)
		}
		if !chunked {
			// Go's client will not send a Trailer header of its own making: write it raw.
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTrailer: Other, %s\r\nConnection: close\r\n\r\n%s",
				len(data), strings.ToLower(HeaderSHA256), data)
			if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
				t.Fatal(err)
			}
			got = <-outcomes
			return
		}
		req.ContentLength = -1
		req.Trailer = http.Header{HeaderSHA256: {trailer}}
		if len(caps) > 0 {
			req.Header.Set("X-Test-Caps", caps[0])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = <-outcomes
	}

	caps = []string{protocol.CapWriteSHA256Trailer}
	put(good, true)
	if got.err != nil || !got.flagged || got.claimed != good || got.claimErr != nil || got.relayed != len(data) {
		t.Fatalf("runner with the capability: %+v; want the flag set and the digest passed on", got)
	}
	caps = nil
	put(good, true)
	if got.err != nil || got.flagged || got.claimed != "" || got.claimErr != nil {
		t.Fatalf("runner without it, right digest: %+v; want it checked here and not passed on", got)
	}
	put(strings.Repeat("0", 64), true)
	if got.err != nil || got.flagged || protocol.CodeOf(got.claimErr) != protocol.CodeFailed {
		t.Fatalf("runner without it, wrong digest: %+v; want the claim to fail", got)
	}
	put("nope", true)
	if protocol.CodeOf(got.claimErr) != protocol.CodeInvalidArgument {
		t.Fatalf("malformed digest: %+v; want invalid_argument", got)
	}
	put(good, false)
	if protocol.CodeOf(got.err) != protocol.CodeInvalidArgument {
		t.Fatalf("trailer declared on a body with a Content-Length: %+v; want invalid_argument", got)
	}
}
