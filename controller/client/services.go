package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// Service logs headers (see controller.HeaderLogOffset, HeaderLogEnd and HeaderLogOverrun).
const (
	headerLogOffset  = "X-Tether-Log-Offset"
	headerLogEnd     = "X-Tether-Log-End"
	headerLogOverrun = "X-Tether-Log-Overrun"
)

func servicesPath(workspace string) string {
	return "/v1/workspaces/" + url.PathEscape(workspace) + "/services"
}

func servicePath(workspace, name string) string {
	return servicesPath(workspace) + "/" + url.PathEscape(name)
}

// StartService starts a service and returns once it is observed ready; a service that fails
// comes back as the typed error carrying its reason and stderr tail.
func (c *Client) StartService(ctx context.Context, workspace string, spec protocol.ServiceSpec) (api.Service, error) {
	var v api.Service
	return v, c.sendJSON(ctx, http.MethodPost, servicesPath(workspace), spec, &v)
}

// ListServices lists a workspace's services: live when its runner is connected, else as recorded.
func (c *Client) ListServices(ctx context.Context, workspace string) ([]api.Service, error) {
	var out []api.Service
	return out, c.get(ctx, servicesPath(workspace), nil, &out)
}

// StopService stops a service and returns once its process group is gone and its port closed.
func (c *Client) StopService(ctx context.Context, workspace, name string) (api.Service, error) {
	var v api.Service
	// A service that already ended answers with its final status: a repeat changes nothing.
	return v, c.do(ctx, request{method: http.MethodPost, path: servicePath(workspace, name) + "/stop", idempotent: true}, &v)
}

// ServiceEndpoint returns where a ready service is reached: the controller's proxy URL, and the
// provider's own address when it has one.
func (c *Client) ServiceEndpoint(ctx context.Context, workspace, name string) (api.ServiceEndpoint, error) {
	var ep api.ServiceEndpoint
	return ep, c.get(ctx, servicePath(workspace, name)+"/endpoint", nil, &ep)
}

// LogsResult says where a log read started and ended.
type LogsResult struct {
	Start int64 // offset of the first byte written
	End   int64 // offset one past the last byte written: where to resume
	// Complete is set when the stream ended as the controller meant it to (the end trailer
	// arrived); otherwise it was cut off and End is the offset to resume from.
	Complete bool
	// Overrun: the read ended early because the bytes after End were overwritten in the
	// runner's log ring before they were sent. Read again from End; that read's Start says
	// where the log resumes (Start > the offset asked for means bytes were lost).
	Overrun bool
}

// ServiceLogs copies a service's log from offset into w (following new bytes with follow). On
// an error the result still says how far it got, so a caller can resume without a gap or a
// duplicate.
func (c *Client) ServiceLogs(ctx context.Context, workspace, name string, offset int64, follow bool, w io.Writer) (LogsResult, error) {
	res := LogsResult{Start: offset, End: offset}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: servicePath(workspace, name) + "/logs", query: q})
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if s := resp.Header.Get(headerLogOffset); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			res.Start, res.End = n, n
		}
	}
	n, err := io.Copy(w, resp.Body)
	res.End += n
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, protocol.Errorf(protocol.CodeUnavailable, "log stream of service %s cut off at offset %d: %v", name, res.End, err)
	}
	if s := resp.Trailer.Get(headerLogEnd); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			res.End, res.Complete = n, true
		}
	}
	res.Overrun = resp.Trailer.Get(headerLogOverrun) == "true"
	if !res.Complete {
		return res, protocol.Errorf(protocol.CodeUnavailable, "log stream of service %s ended without its end offset at %d", name, res.End)
	}
	return res, nil
}
