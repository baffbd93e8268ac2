package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// A put whose SHA-256 follows its bytes (an HTTP trailer: a client that hashes as it sends, or
// the CLI reading stdin) publishes only when the runner's digest of what it wrote matches; a
// wrong, missing or malformed trailer publishes nothing and leaves a replaced file as it was.
func TestFilesPutDigestAfterBytes(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := []byte("the old content, which must survive\n")
	mustWrite(t, filepath.Join(ws.Root, "existing.bin"), old, 0o644)
	data := bytes.Repeat([]byte("hashed as it is sent\n"), 200_000) // ~4 MiB: several body chunks
	sum := sha256.Sum256(data)

	// The Go client's HashAsSent: the digest goes as a trailer and is checked.
	res, err := cl.WriteFile(ctx, ws.ID, "sent.bin", bytes.NewReader(data), client.WriteOptions{HashAsSent: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != hex.EncodeToString(sum[:]) || res.Bytes != int64(len(data)) {
		t.Fatalf("result %+v, want %d bytes with sha256 %x", res, len(data), sum)
	}
	if got, err := os.ReadFile(filepath.Join(ws.Root, "sent.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("published %d bytes (%v), want the %d sent", len(got), err, len(data))
	}

	// Raw requests, so the trailer can be wrong.
	put := func(target string, header, trailer map[string]string) (int, protocol.Error) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut,
			c.Addr+"/v1/workspaces/"+ws.ID+"/files/"+target+"?replace=true", io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // chunked, which a trailer needs
		req.Header.Set("Authorization", protocol.Bearer(c.Token))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		req.Trailer = http.Header{}
		for k, v := range trailer {
			req.Trailer.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error protocol.Error `json:"error"`
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, body.Error
	}
	const digest = "X-Tether-Sha256"
	zeros := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name            string
		header, trailer map[string]string
		code            protocol.Code
	}{
		{"wrong digest", nil, map[string]string{digest: zeros}, protocol.CodeFailed},
		{"declared, never sent", nil, map[string]string{digest: ""}, protocol.CodeInvalidArgument},
		{"not a digest", nil, map[string]string{digest: "abc"}, protocol.CodeInvalidArgument},
		{"header and trailer", map[string]string{digest: hex.EncodeToString(sum[:])}, map[string]string{digest: hex.EncodeToString(sum[:])}, protocol.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, target := range []string{"new.bin", "existing.bin"} {
				status, e := put(target, tc.header, tc.trailer)
				if status < 400 || e.Code != tc.code {
					t.Fatalf("put %s: status %d, error %+v; want %s", target, status, e, tc.code)
				}
			}
			if _, err := os.Stat(filepath.Join(ws.Root, "new.bin")); !os.IsNotExist(err) {
				t.Fatalf("a put with a bad trailer published new.bin (%v)", err)
			}
			if got, _ := os.ReadFile(filepath.Join(ws.Root, "existing.bin")); !bytes.Equal(got, old) {
				t.Fatalf("a put with a bad trailer replaced existing.bin: %d bytes", len(got))
			}
			eventually(t, 30*time.Second, "the runner to remove its temporary files", func() bool {
				return len(tempFilesUnder(t, ws.Root)) == 0
			})
		})
	}
	// The right digest as a trailer replaces the file.
	if status, e := put("existing.bin", nil, map[string]string{digest: hex.EncodeToString(sum[:])}); status != http.StatusCreated {
		t.Fatalf("put with the right trailer: status %d, error %+v", status, e)
	}
	if got, _ := os.ReadFile(filepath.Join(ws.Root, "existing.bin")); !bytes.Equal(got, data) {
		t.Fatalf("the right trailer did not publish: %d bytes", len(got))
	}

	// The CLI sends stdin with its digest after it.
	r := c.cli(t, bytes.NewReader(data), "files", "put", ws.ID, "-", "stdin.bin")
	if r.Code != 0 {
		t.Fatalf("files put from stdin: exit %d: %s", r.Code, r.Stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(ws.Root, "stdin.bin")); !bytes.Equal(got, data) {
		t.Fatalf("files put from stdin published %d bytes, want %d", len(got), len(data))
	}
}
