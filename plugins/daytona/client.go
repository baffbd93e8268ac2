package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/plugins/provider"
)

// This is a small typed client for the part of Daytona's REST API the
// provider uses (https://app.daytona.io/api, documented by Daytona's
// OpenAPI): sandboxes, their lifecycle, and the toolbox (files, process
// sessions). No Daytona Go SDK is published, so it is written here; keep it
// to what the provider calls.

// Sandbox states documented by Daytona (SandboxState).
const (
	StateCreating   = "creating"
	StateRestoring  = "restoring"
	StateDestroyed  = "destroyed"
	StateDestroying = "destroying"
	StateStarted    = "started"
	StateStopped    = "stopped"
	StateStarting   = "starting"
	StateStopping   = "stopping"
	StateError      = "error"
	StateArchived   = "archived"
	StateArchiving  = "archiving"
)

// AutoDeleteDisabled is the auto-delete interval that turns it off
// (0 would delete as soon as the sandbox stops).
const AutoDeleteDisabled = -1

// Sandbox is the documented Sandbox object, the fields the provider reads.
type Sandbox struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name,omitempty"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	CPU                 int               `json:"cpu,omitempty"`
	Memory              int               `json:"memory,omitempty"`
	Disk                int               `json:"disk,omitempty"`
	AutoStopInterval    *int              `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval,omitempty"`
}

// CreateSandbox is the documented create request body.
type CreateSandbox struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Target              string            `json:"target,omitempty"`
	Labels              map[string]string `json:"labels"`
	CPU                 int               `json:"cpu,omitempty"`
	Memory              int               `json:"memory,omitempty"` // GiB
	Disk                int               `json:"disk,omitempty"`   // GiB
	AutoStopInterval    *int              `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval,omitempty"`
}

// PortPreviewURL is the documented preview link of a sandbox port.
type PortPreviewURL struct {
	SandboxID string `json:"sandboxId"`
	URL       string `json:"url"`
	Token     string `json:"token"`
}

// PreviewTokenHeader carries PortPreviewURL.Token on requests to a private
// sandbox's preview link.
const PreviewTokenHeader = "x-daytona-preview-token"

// APIError is a non-2xx answer from Daytona.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("daytona: %d %s", e.Status, e.Message) }

// statusOf returns the HTTP status of an *APIError in err, or 0.
func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Client talks to one Daytona API. The key is sent as a bearer token and
// appears in no error or log.
type Client struct {
	base string // e.g. https://app.daytona.io/api, no trailing slash
	key  string
	http *http.Client
}

// NewClient returns a client for the API at base.
func NewClient(base, key string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), key: key, http: &http.Client{}}
}

func (c *Client) do(ctx context.Context, method, path, ctype string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Message any `json:"message"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Message != nil {
			msg = fmt.Sprint(e.Message)
		}
		return &APIError{Status: resp.StatusCode, Message: msg}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	return c.do(ctx, method, path, ctype, body, out)
}

func esc(s string) string { return url.PathEscape(s) }

// Create is POST /sandbox.
func (c *Client) Create(ctx context.Context, req CreateSandbox) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, http.MethodPost, "/sandbox", req, &sb)
	return sb, err
}

// Get is GET /sandbox/{sandboxIdOrName}.
func (c *Client) Get(ctx context.Context, idOrName string) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, http.MethodGet, "/sandbox/"+esc(idOrName), nil, &sb)
	return sb, err
}

// List is GET /sandbox?labels={json}: the sandboxes carrying all labels.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	b, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var out []Sandbox
	err = c.doJSON(ctx, http.MethodGet, "/sandbox?labels="+url.QueryEscape(string(b)), nil, &out)
	return out, err
}

// Delete is DELETE /sandbox/{sandboxIdOrName}.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/sandbox/"+esc(id), nil, nil)
}

// Start, Stop and Archive are POST /sandbox/{id}/{start,stop,archive}.
func (c *Client) Start(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodPost, "/sandbox/"+esc(id)+"/start", nil, nil)
}

// Stop stops a started sandbox; Daytona refuses it on an archived one.
func (c *Client) Stop(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodPost, "/sandbox/"+esc(id)+"/stop", nil, nil)
}

// Archive moves a stopped sandbox to object storage.
func (c *Client) Archive(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodPost, "/sandbox/"+esc(id)+"/archive", nil, nil)
}

// SetAutoDelete is POST /sandbox/{id}/autodelete/{interval} (minutes;
// AutoDeleteDisabled turns it off).
func (c *Client) SetAutoDelete(ctx context.Context, id string, minutes int) error {
	return c.doJSON(ctx, http.MethodPost, "/sandbox/"+esc(id)+"/autodelete/"+strconv.Itoa(minutes), nil, nil)
}

// PreviewURL is GET /sandbox/{id}/ports/{port}/preview-url.
func (c *Client) PreviewURL(ctx context.Context, id string, port int) (PortPreviewURL, error) {
	var p PortPreviewURL
	err := c.doJSON(ctx, http.MethodGet, "/sandbox/"+esc(id)+"/ports/"+strconv.Itoa(port)+"/preview-url", nil, &p)
	return p, err
}

func toolbox(id, rest string) string { return "/toolbox/" + esc(id) + "/toolbox" + rest }

// ProjectDir is GET /toolbox/{id}/toolbox/project-dir: the sandbox user's
// working directory.
func (c *Client) ProjectDir(ctx context.Context, id string) (string, error) {
	var out struct {
		Dir string `json:"dir"`
	}
	err := c.doJSON(ctx, http.MethodGet, toolbox(id, "/project-dir"), nil, &out)
	return out.Dir, err
}

// Upload streams the local file at src to path in the sandbox through
// POST /toolbox/{id}/toolbox/files/upload?path= (multipart, field "file").
func (c *Client) Upload(ctx context.Context, id, path, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", "upload")
		if err == nil {
			_, err = io.Copy(part, f)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	return c.do(ctx, http.MethodPost, toolbox(id, "/files/upload?path="+url.QueryEscape(path)), mw.FormDataContentType(), pr, nil)
}

// FileInfo is the documented toolbox FileInfo, the fields the provider reads.
type FileInfo struct {
	Name        string `json:"name"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	ModTime     string `json:"modTime"`
	Mode        string `json:"mode,omitempty"`
	Permissions string `json:"permissions,omitempty"`
}

// ListFiles is GET /toolbox/{id}/toolbox/files?path=: the entries of one
// directory (not recursive).
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]FileInfo, error) {
	var out []FileInfo
	err := c.doJSON(ctx, http.MethodGet, toolbox(id, "/files?path="+url.QueryEscape(dir)), nil, &out)
	return out, err
}

// Download is GET /toolbox/{id}/toolbox/files/download?path=: the file's
// bytes as the body. The caller closes it.
func (c *Client) Download(ctx context.Context, id, file string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+toolbox(id, "/files/download?path="+url.QueryEscape(file)), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Message any `json:"message"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Message != nil {
			msg = fmt.Sprint(e.Message)
		}
		return nil, &APIError{Status: resp.StatusCode, Message: msg}
	}
	return resp.Body, nil
}

// CreateSession is POST /toolbox/{id}/toolbox/process/session.
func (c *Client) CreateSession(ctx context.Context, id, session string) error {
	return c.doJSON(ctx, http.MethodPost, toolbox(id, "/process/session"), map[string]string{"sessionId": session}, nil)
}

// ExecAsync runs command in session without waiting for it
// (POST .../process/session/{sessionId}/exec with runAsync) and returns
// the command id.
func (c *Client) ExecAsync(ctx context.Context, id, session, command string) (string, error) {
	var out struct {
		CmdID string `json:"cmdId"`
	}
	in := map[string]any{"command": command, "runAsync": true}
	err := c.doJSON(ctx, http.MethodPost, toolbox(id, "/process/session/"+esc(session)+"/exec"), in, &out)
	return out.CmdID, err
}

// typed turns a client error into a provider error.
func typed(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	code := provider.CodeProviderFailed
	switch s := statusOf(err); {
	case s == http.StatusNotFound:
		code = provider.CodeNotFound
	case s == http.StatusConflict:
		code = provider.CodeConflict
	case s == http.StatusBadRequest:
		code = provider.CodeFailedPrecondition
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		code = provider.CodeFailedPrecondition
	case s == 0 && errors.As(err, new(*url.Error)):
		code = provider.CodeUnavailable
	}
	return provider.Errorf(code, "%s: %v", what, err)
}
