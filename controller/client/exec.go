package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/protocol"
)

// cancelWait bounds how long Exec waits for the exit of a command it canceled.
const cancelWait = 15 * time.Second

// Exec runs a command in the workspace, streaming stdin (when not nil) to it and its stdout and
// stderr back. Canceling ctx kills the command's whole process group; Exec then still waits
// briefly for the runner to confirm, so the returned exit says how it ended.
func (c *Client) Exec(ctx context.Context, id string, args protocol.ExecArgs, stdin io.Reader, stdout, stderr io.Writer) (protocol.ExecExit, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/v1/workspaces/" + url.PathEscape(id) + "/exec"
	h := http.Header{}
	h.Set("Authorization", protocol.Bearer(c.token))
	if c.epoch > 0 {
		h.Set(headerEpoch, strconv.FormatUint(c.epoch, 10))
	}
	conn, err := c.dialExec(ctx, u.String(), h)
	if err != nil {
		return protocol.ExecExit{}, err
	}
	defer conn.Close()
	conn.SetReadLimit(protocol.MaxChannelFrame + 64)

	args.Stdin = stdin != nil
	var wmu sync.Mutex
	send := func(typ int, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.WriteMessage(typ, p)
	}
	first, err := json.Marshal(args)
	if err != nil {
		return protocol.ExecExit{}, err
	}
	if err := send(websocket.BinaryMessage, first); err != nil {
		return protocol.ExecExit{}, protocol.Errorf(protocol.CodeUnavailable, "exec: %v", err)
	}
	if stdin != nil {
		go pumpStdin(stdin, send)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			ctl, _ := json.Marshal(protocol.ExecControl{Cancel: true})
			_ = send(websocket.BinaryMessage, append([]byte{byte(protocol.ChanControl)}, ctl...))
			// If the confirmation never comes, stop waiting for it.
			select {
			case <-time.After(cancelWait):
				conn.Close()
			case <-done:
			}
		case <-done:
		}
	}()
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return protocol.ExecExit{Canceled: true, ExitCode: -1}, ctx.Err()
			}
			return protocol.ExecExit{}, protocol.Errorf(protocol.CodeUnavailable, "exec stream ended before the command's exit: %v", err)
		}
		if len(msg) == 0 {
			continue
		}
		p := msg[1:]
		switch protocol.Channel(msg[0]) {
		case protocol.ChanStdout:
			if _, err := stdout.Write(p); err != nil {
				return protocol.ExecExit{}, err
			}
		case protocol.ChanStderr:
			if _, err := stderr.Write(p); err != nil {
				return protocol.ExecExit{}, err
			}
		case protocol.ChanExit:
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				return exit, protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)
			}
			if exit.Error != nil && exit.ExitCode < 0 && exit.Signal == 0 {
				return exit, exit.Error
			}
			return exit, nil
		case protocol.ChanError:
			var e protocol.Error
			if err := json.Unmarshal(p, &e); err != nil {
				return protocol.ExecExit{}, protocol.Errorf(protocol.CodeInternal, "bad error frame: %v", err)
			}
			return protocol.ExecExit{}, &e
		}
	}
}

// dialExec opens the exec websocket. The command starts only once its arguments are sent over
// the open socket, so a dial that failed before the upgrade (the controller unavailable, the
// connection refused or dropped) ran nothing and is retried under the retry policy; nothing
// after the upgrade ever is.
func (c *Client) dialExec(ctx context.Context, u string, h http.Header) (*websocket.Conn, error) {
	dialer := websocket.Dialer{EnableCompression: false, ReadBufferSize: 256 << 10, WriteBufferSize: 64 << 10, HandshakeTimeout: 30 * time.Second}
	var conn *websocket.Conn
	err := c.withRetries(ctx, func() (bool, error) {
		var resp *http.Response
		var err error
		conn, resp, err = dialer.DialContext(ctx, u, h)
		switch {
		case err == nil:
			return false, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case resp != nil && resp.StatusCode/100 != 2:
			err := decodeError(resp)
			return protocol.CodeOf(err) == protocol.CodeUnavailable, err
		}
		return retryableConnError(err, true), protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, err)
	})
	return conn, err
}

func pumpStdin(r io.Reader, send func(int, []byte) error) {
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf[1:])
		if n > 0 {
			buf[0] = byte(protocol.ChanStdin)
			if send(websocket.BinaryMessage, buf[:n+1]) != nil {
				return
			}
		}
		if err != nil {
			// EOF or not, the command will get no more input; tell it so it does not wait forever.
			_ = send(websocket.BinaryMessage, []byte{byte(protocol.ChanStdin)})
			return
		}
	}
}
