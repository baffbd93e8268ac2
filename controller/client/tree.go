package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/protocol"
)

// Tree export headers (see controller.HeaderType, HeaderEntries and HeaderSkipped).
const (
	headerType    = "X-Tether-Type"
	headerEntries = "X-Tether-Entries"
	headerSkipped = "X-Tether-Skipped"
)

// TreeExport is a tar of one workspace path as it arrives. Read gives the tar's bytes and, at
// its end, io.EOF only if the controller confirmed the whole archive (its trailer): a stream
// cut short, or refused half-way, ends with an error instead, whatever the bytes looked like.
type TreeExport struct {
	// Type is the exported path's type: file, dir or symlink.
	Type string
	// Entries and Skipped are set once Read returned io.EOF: the archive's entries, and the
	// sockets, fifos and devices the runner left out.
	Entries, Skipped int
	resp             *http.Response
	path             string
	n                int64
}

// ExportTree starts a tar export of path p of workspace id; name names p in the archive ("":
// its base name; the workspace root's is the root's own base name). The caller closes it.
func (c *Client) ExportTree(ctx context.Context, id, p, name string) (*TreeExport, error) {
	q := url.Values{"path": {p}}
	if name != "" {
		q.Set("name", name)
	}
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: "/v1/workspaces/" + url.PathEscape(id) + "/tree", query: q})
	if err != nil {
		return nil, err
	}
	return &TreeExport{Type: resp.Header.Get(headerType), resp: resp, path: p}, nil
}

func (t *TreeExport) Read(b []byte) (int, error) {
	n, err := t.resp.Body.Read(b)
	t.n += int64(n)
	switch {
	case err == io.EOF:
		entries, perr := strconv.Atoi(t.resp.Trailer.Get(headerEntries))
		if perr != nil {
			return n, protocol.Errorf(protocol.CodeFailed, "export of %s ended after %d bytes without the controller's confirmation", t.path, t.n)
		}
		t.Entries = entries
		t.Skipped, _ = strconv.Atoi(t.resp.Trailer.Get(headerSkipped))
	case err != nil:
		return n, protocol.Errorf(protocol.CodeFailed, "export of %s cut off after %d bytes: %v", t.path, t.n, err)
	}
	return n, err
}

// Close ends the export.
func (t *TreeExport) Close() error { return t.resp.Body.Close() }
