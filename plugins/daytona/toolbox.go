package daytona

import (
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/tetherhq/tether/plugins/provider"
)

// Toolbox is one sandbox's toolbox API (toolbox.json): its base is the
// sandbox record's toolboxProxyUrl plus /{sandboxId}. Daytona serves it
// only while the sandbox is started.
type Toolbox struct {
	c       *Client
	base    string
	sandbox string
}

// Toolbox returns sb's toolbox, reading its proxy URL from the API when
// the record lacks it.
func (c *Client) Toolbox(ctx context.Context, sb Sandbox) (*Toolbox, error) {
	proxy := sb.ToolboxProxyURL
	if proxy == "" {
		var err error
		if proxy, err = c.ToolboxProxyURL(ctx, sb.ID); err != nil {
			return nil, typed("toolbox proxy URL of "+sb.ID, err)
		}
	}
	u, err := url.Parse(proxy)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, provider.Errorf(provider.CodeProviderFailed, "sandbox %s has toolbox proxy URL %q, not an http(s) URL", sb.ID, proxy)
	}
	return &Toolbox{c: c, base: strings.TrimRight(proxy, "/") + "/" + esc(sb.ID), sandbox: sb.ID}, nil
}

func (t *Toolbox) url(path string, q url.Values) string {
	if len(q) == 0 {
		return t.base + path
	}
	return t.base + path + "?" + q.Encode()
}

// HomeDir is GET /user-home-dir: the sandbox user's home directory.
func (t *Toolbox) HomeDir(ctx context.Context) (string, error) {
	var out struct {
		Dir string `json:"dir"`
	}
	err := t.c.call(ctx, http.MethodGet, t.url("/user-home-dir", nil), nil, &out)
	return out.Dir, err
}

// Upload streams the local file at src to path in the sandbox through
// POST /files/upload-v2?path= (multipart, field "file"). Daytona writes
// the destination in place (truncating it): upload to a temp name and
// Move it into place.
func (t *Toolbox) Upload(ctx context.Context, path, src string) error {
	return t.upload(ctx, path, func() (io.ReadCloser, error) { return os.Open(src) })
}

// UploadBytes uploads b to path like Upload.
func (t *Toolbox) UploadBytes(ctx context.Context, path string, b []byte) error {
	return t.upload(ctx, path, func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(b))), nil })
}

func (t *Toolbox) upload(ctx context.Context, path string, open func() (io.ReadCloser, error)) error {
	boundary := multipart.NewWriter(io.Discard).Boundary()
	mk := func() (io.ReadCloser, error) {
		f, err := open()
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		if err := mw.SetBoundary(boundary); err != nil {
			f.Close()
			return nil, err
		}
		go func() {
			defer f.Close()
			part, err := mw.CreateFormFile("file", "upload")
			if err == nil {
				_, err = io.Copy(part, f)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	resp, err := t.c.send(ctx, http.MethodPost, t.url("/files/upload-v2", url.Values{"path": {path}}),
		"multipart/form-data; boundary="+boundary, mk)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// DeleteFile is DELETE /files?path=.
func (t *Toolbox) DeleteFile(ctx context.Context, path string) error {
	return t.c.call(ctx, http.MethodDelete, t.url("/files", url.Values{"path": {path}}), nil, nil)
}

// FileInfo is the documented toolbox FileInfo, the fields the provider reads.
type FileInfo struct {
	Name        string `json:"name"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	ModTime     string `json:"modTime"`    // deprecated: Go's time.String() layout
	ModifiedAt  string `json:"modifiedAt"` // RFC 3339
	Mode        string `json:"mode,omitempty"`
	Permissions string `json:"permissions,omitempty"`
}

// ListFiles is GET /files?path=: the entries of one directory.
func (t *Toolbox) ListFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	var out []FileInfo
	err := t.c.call(ctx, http.MethodGet, t.url("/files", url.Values{"path": {dir}}), nil, &out)
	return out, err
}

// Download is GET /files/download?path=: the file's bytes as the body. The
// caller closes it.
func (t *Toolbox) Download(ctx context.Context, file string) (io.ReadCloser, error) {
	resp, err := t.c.send(ctx, http.MethodGet, t.url("/files/download", url.Values{"path": {file}}), "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ExecResult is the documented ExecuteResponse.
type ExecResult struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// Execute is POST /process/execute: command runs to its end (at most
// timeout seconds) and its exit code and output come back.
func (t *Toolbox) Execute(ctx context.Context, command string, timeout int) (ExecResult, error) {
	var out ExecResult
	err := t.c.call(ctx, http.MethodPost, t.url("/process/execute", nil), map[string]any{"command": command, "timeout": timeout}, &out)
	return out, err
}

// CreateSession is POST /process/session.
func (t *Toolbox) CreateSession(ctx context.Context, session string) error {
	return t.c.call(ctx, http.MethodPost, t.url("/process/session", nil), map[string]string{"sessionId": session}, nil)
}

// Session is the documented Session, the fields the provider reads.
type Session struct {
	SessionID string `json:"sessionId"`
}

// Sessions is GET /process/session.
func (t *Toolbox) Sessions(ctx context.Context) ([]Session, error) {
	var out []Session
	err := t.c.call(ctx, http.MethodGet, t.url("/process/session", nil), nil, &out)
	return out, err
}

// DeleteSession is DELETE /process/session/{sessionId}: the session's
// processes get SIGTERM, then SIGKILL.
func (t *Toolbox) DeleteSession(ctx context.Context, session string) error {
	return t.c.call(ctx, http.MethodDelete, t.url("/process/session/"+esc(session), nil), nil, nil)
}

// ExecAsync runs command in session without waiting for it
// (POST /process/session/{sessionId}/exec with runAsync) and returns the
// command id. Daytona keeps the command text (a file in the sandbox, its
// audit log): it must carry no secret.
func (t *Toolbox) ExecAsync(ctx context.Context, session, command string) (string, error) {
	var out struct {
		CmdID string `json:"cmdId"`
	}
	in := map[string]any{"command": command, "runAsync": true}
	err := t.c.call(ctx, http.MethodPost, t.url("/process/session/"+esc(session)+"/exec", nil), in, &out)
	return out.CmdID, err
}
