package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// engineAPI is a minimal Docker Engine API client over the daemon's unix socket: the Go-program
// reference for tether's Go client, as the docker CLI is the reference for tether's CLI.
type engineAPI struct {
	hc      *http.Client
	prefix  string // "/v1.41"
	version string // server version
}

// newEngineAPI connects to DOCKER_HOST (unix:// only) or /var/run/docker.sock.
func newEngineAPI(ctx context.Context) (*engineAPI, error) {
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		p, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			return nil, fmt.Errorf("DOCKER_HOST %s is not a unix socket", h)
		}
		sock = p
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	e := &engineAPI{hc: &http.Client{Transport: tr}}
	var v struct{ Version, APIVersion string }
	if err := e.do(ctx, http.MethodGet, "/version", nil, &v); err != nil {
		return nil, err
	}
	if v.APIVersion == "" {
		return nil, errors.New("daemon reported no API version")
	}
	e.prefix, e.version = "/v"+v.APIVersion, v.Version
	return e, nil
}

func (e *engineAPI) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+e.prefix+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("docker API %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

func (e *engineAPI) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := e.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// run creates and starts a container, what `docker run -d` does.
func (e *engineAPI) run(ctx context.Context, name, image string, cmd []string) (string, error) {
	var created struct {
		ID string `json:"Id"`
	}
	body := map[string]any{
		"Image":      image,
		"Cmd":        cmd,
		"Labels":     map[string]string{benchLabel: "1"},
		"HostConfig": map[string]any{"NetworkMode": "none"},
	}
	if err := e.do(ctx, http.MethodPost, "/containers/create?name="+url.QueryEscape(name), body, &created); err != nil {
		return "", err
	}
	return created.ID, e.do(ctx, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil)
}

func (e *engineAPI) remove(ctx context.Context, id string) error {
	return e.do(ctx, http.MethodDelete, "/containers/"+id+"?force=1", nil, nil)
}

func (e *engineAPI) pid(ctx context.Context, id string) (int, error) {
	var c struct{ State struct{ Pid int } }
	if err := e.do(ctx, http.MethodGet, "/containers/"+id+"/json", nil, &c); err != nil {
		return 0, err
	}
	if c.State.Pid <= 0 {
		return 0, fmt.Errorf("container %s is not running", id)
	}
	return c.State.Pid, nil
}

// exec runs argv in the container the way `docker exec` does (create, start attached, inspect),
// copying its stdout to stdout, and requires exit status 0.
func (e *engineAPI) exec(ctx context.Context, id string, stdout io.Writer, argv ...string) error {
	var created struct {
		ID string `json:"Id"`
	}
	body := map[string]any{"Cmd": argv, "AttachStdout": true, "AttachStderr": true}
	if err := e.do(ctx, http.MethodPost, "/containers/"+id+"/exec", body, &created); err != nil {
		return err
	}
	resp, err := e.request(ctx, http.MethodPost, "/exec/"+created.ID+"/start", map[string]any{"Detach": false, "Tty": false})
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	err = demux(resp.Body, stdout, &stderr)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var st struct{ ExitCode int }
	if err := e.do(ctx, http.MethodGet, "/exec/"+created.ID+"/json", nil, &st); err != nil {
		return err
	}
	if st.ExitCode != 0 {
		return fmt.Errorf("%s: exit status %d: %s", strings.Join(argv, " "), st.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// demux splits Docker's multiplexed raw stream (8-byte headers: stream, 0, 0, 0, size) into
// stdout and stderr until EOF.
func demux(body io.Reader, stdout, stderr io.Writer) error {
	r := bufio.NewReaderSize(body, 64<<10)
	buf := make([]byte, 64<<10)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		w := stdout
		if hdr[0] == 2 {
			w = stderr
		}
		for n := int(binary.BigEndian.Uint32(hdr[4:])); n > 0; {
			m, err := io.ReadFull(r, buf[:min(n, len(buf))])
			if err != nil {
				return err
			}
			if _, err := w.Write(buf[:m]); err != nil {
				return err
			}
			n -= m
		}
	}
}
