package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// SetSource records the host directory workspace id was imported from and captures its base.
func (c *Client) SetSource(ctx context.Context, id, dir string) (api.Workspace, error) {
	var ws api.Workspace
	err := c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/source", api.SourceRequest{Dir: dir}, &ws)
	return ws, err
}

// Pull asks for the plan of a pull: what workspace id changed since its base.
func (c *Client) Pull(ctx context.Context, id string, req api.PullRequest) (api.PullPlan, error) {
	var plan api.PullPlan
	err := c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/pull", req, &plan)
	return plan, err
}

// Pulled tells the controller a pull from base brought snapshot back whole: it is the base now.
func (c *Client) Pulled(ctx context.Context, id, base, snapshot string) (api.Workspace, error) {
	var ws api.Workspace
	err := c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/pulled", api.PulledRequest{Base: base, Snapshot: snapshot}, &ws)
	return ws, err
}

// SnapshotFiles streams the named regular files of snapshot snapID as a tar. The caller closes
// it.
func (c *Client) SnapshotFiles(ctx context.Context, snapID string, paths []string) (*Confirmed, error) {
	r := request{method: http.MethodPost, path: "/v1/snapshots/" + url.PathEscape(snapID) + "/files"}
	b, err := jsonBody(api.FilesRequest{Paths: paths})
	if err != nil {
		return nil, err
	}
	r.body, r.contentType, r.contentLength = b, "application/json", b.Size()
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return nil, err
	}
	return &Confirmed{resp: resp, what: "files of " + snapID}, nil
}

// GitPack streams a Git pack of the commits reachable from want and from none of haves, read
// from workspace id's repository by its runner. The caller closes it.
func (c *Client) GitPack(ctx context.Context, id, want string, haves []string) (*Confirmed, error) {
	q := url.Values{"want": {want}}
	for _, h := range haves {
		q.Add("have", h)
	}
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: "/v1/workspaces/" + url.PathEscape(id) + "/git/pack", query: q})
	if err != nil {
		return nil, err
	}
	return &Confirmed{resp: resp, what: "git pack of " + id}, nil
}

// Confirmed is a streamed answer whose end the controller confirms in a trailer: Read reports
// io.EOF only then; a stream cut short ends with an error, whatever its bytes looked like.
type Confirmed struct {
	// Entries is the trailer's count, once Read returned io.EOF.
	Entries int
	resp    *http.Response
	what    string
	n       int64
}

func (s *Confirmed) Read(b []byte) (int, error) {
	n, err := s.resp.Body.Read(b)
	s.n += int64(n)
	switch {
	case err == io.EOF:
		entries, perr := strconv.Atoi(s.resp.Trailer.Get(headerEntries))
		if perr != nil {
			return n, protocol.Errorf(protocol.CodeFailed, "%s ended after %d bytes without the controller's confirmation", s.what, s.n)
		}
		s.Entries = entries
	case err != nil:
		return n, protocol.Errorf(protocol.CodeFailed, "%s cut off after %d bytes: %v", s.what, s.n, err)
	}
	return n, err
}

// Close ends the stream.
func (s *Confirmed) Close() error { return s.resp.Body.Close() }

func jsonBody(v any) (*bytes.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}
