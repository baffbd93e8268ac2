package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/protocol"
)

// maxWatchLine bounds one line of a watch stream (the controller writes events it checked,
// each well under protocol.MaxWatchEvent).
const maxWatchLine = 2 * protocol.MaxWatchEvent

// Watch is a stream of changes under a workspace directory as they arrive.
type Watch struct {
	// Watches is how many directories the watch holds.
	Watches int
	resp    *http.Response
	sc      *bufio.Scanner
	ctx     context.Context
}

// Watch starts watching directory p of workspace id (and, with recursive, every directory
// beneath it). A path that is missing, not a directory, a symlink or escapes the workspace is
// refused here, with its typed error. The caller closes the Watch.
func (c *Client) Watch(ctx context.Context, id, p string, recursive bool) (*Watch, error) {
	q := url.Values{"path": {p}}
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: "/v1/workspaces/" + url.PathEscape(id) + "/watch", query: q})
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<10), maxWatchLine)
	w := &Watch{resp: resp, sc: sc, ctx: ctx}
	w.Watches, _ = strconv.Atoi(resp.Header.Get("X-Tether-Watches"))
	return w, nil
}

// Next returns the next event. The watch's end is an error: the reason the controller gave (the
// runner's connection dropped: unavailable; the directory went away: not_found), or
// unavailable when the stream was cut without one; never io.EOF, since a watch does not end on
// its own. Once ctx ends, Next returns ctx's error.
func (w *Watch) Next() (protocol.WatchEvent, error) {
	var ev protocol.WatchEvent
	if !w.sc.Scan() {
		if w.ctx.Err() != nil {
			return ev, w.ctx.Err()
		}
		err := w.sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return ev, protocol.Errorf(protocol.CodeUnavailable, "the watch stream was cut: %v", err)
	}
	if err := json.Unmarshal(w.sc.Bytes(), &ev); err != nil {
		return ev, protocol.Errorf(protocol.CodeCorrupt, "a watch line that does not decode: %v", err)
	}
	if ev.Type == protocol.WatchError {
		if ev.Error == nil {
			return ev, protocol.Errorf(protocol.CodeFailed, "the watch ended")
		}
		return ev, ev.Error
	}
	return ev, nil
}

// Close ends the watch.
func (w *Watch) Close() error {
	err := w.resp.Body.Close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
