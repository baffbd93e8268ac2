package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// This is a small typed client for the part of Daytona's REST API the
// provider uses, derived from Daytona's published OpenAPI documents
// (plugins/daytona/testdata: api.json and toolbox.json of the
// daytona/clients repository at commit d94a128, v0.205.1): sandboxes and
// their lifecycle on the API, files and process sessions on the toolbox.
// Daytona publishes an official Go SDK (daytona/clients/sdk-go), but it is
// not on the Go module proxy this project builds from, and it would bring
// far more than the dozen calls used here; so the client stays here, kept
// to what the provider calls and checked against those documents by the
// tests (spec_test.go). Keep it that way: a call added here gets a fact in
// testdata/spec-facts.json and goes through the fake's validation.

// APIVersion is the Daytona API release the client follows.
const APIVersion = "v0.205.1 (daytona/clients d94a128)"

// Sandbox states documented by Daytona (SandboxState); states.go maps
// every one of them.
const (
	StateCreating         = "creating"
	StateRestoring        = "restoring"
	StateDestroyed        = "destroyed"
	StateDestroying       = "destroying"
	StateStarted          = "started"
	StateStopped          = "stopped"
	StateStarting         = "starting"
	StateStopping         = "stopping"
	StateError            = "error"
	StateBuildFailed      = "build_failed"
	StatePendingBuild     = "pending_build"
	StateBuildingSnapshot = "building_snapshot"
	StateUnknown          = "unknown"
	StatePullingSnapshot  = "pulling_snapshot"
	StateArchived         = "archived"
	StateArchiving        = "archiving"
	StateResizing         = "resizing"
	StateSnapshotting     = "snapshotting"
	StateForking          = "forking"
	StatePausing          = "pausing"
	StatePaused           = "paused"
	StateResuming         = "resuming"
)

// AutoDeleteDisabled is the auto-delete interval that turns it off
// (0 would delete as soon as the sandbox stops).
const AutoDeleteDisabled = -1

// Sandbox is the documented Sandbox (and SandboxListItem) object, the
// fields the provider reads.
type Sandbox struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name,omitempty"`
	State               string            `json:"state"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	CPU                 float64           `json:"cpu,omitempty"`
	Memory              float64           `json:"memory,omitempty"`
	Disk                float64           `json:"disk,omitempty"`
	AutoStopInterval    *float64          `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *float64          `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *float64          `json:"autoDeleteInterval,omitempty"`
	// ToolboxProxyURL is the base of this sandbox's toolbox API:
	// {toolboxProxyUrl}/{sandboxId}/{endpoint}.
	ToolboxProxyURL string `json:"toolboxProxyUrl"`
}

// BuildInfo is the documented CreateBuildInfo: the image a sandbox is
// built from when it does not start from a snapshot.
type BuildInfo struct {
	DockerfileContent string `json:"dockerfileContent"`
}

// CreateSandbox is the documented create request body. CPU, memory and
// disk go only with BuildInfo: with a snapshot Daytona answers 400
// "Cannot specify Sandbox resources when using a snapshot".
type CreateSandbox struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Target              string            `json:"target,omitempty"`
	Labels              map[string]string `json:"labels"`
	CPU                 int               `json:"cpu,omitempty"`
	Memory              int               `json:"memory,omitempty"` // GB
	Disk                int               `json:"disk,omitempty"`   // GB
	AutoStopInterval    *int              `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval,omitempty"`
	BuildInfo           *BuildInfo        `json:"buildInfo,omitempty"`
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

// APIError is a non-2xx answer from Daytona. The API answers NestJS's
// {statusCode, message, error}; the toolbox its ErrorResponse
// {statusCode, message, path, timestamp, code?}. message may be a list
// (validation failures).
type APIError struct {
	Status  int
	Message string
	Code    string // the toolbox's DaemonErrorCode, when given
	// Daytona: the body is Daytona's own error ({statusCode, message}, statusCode equal to the
	// HTTP status). A 404 without it may be a gateway's, a wrong api_url's, or another
	// organization's: it is not taken to mean the sandbox is gone.
	Daytona bool
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("daytona: %d %s (%s)", e.Status, e.Message, e.Code)
	}
	return fmt.Sprintf("daytona: %d %s", e.Status, e.Message)
}

// statusOf returns the HTTP status of an *APIError in err, or 0.
// notFound reports whether err is Daytona itself saying 404: what the plugin takes to mean
// "no such sandbox" (or session, or file). Any other 404 is a failure, never "gone": a sandbox
// reported gone can end with its workspace declared lost.
func notFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Daytona
}

func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Retry bounds. A 429 is retried after the wait its Retry-After headers
// ask (capped), a 409 "state change in progress" with a growing backoff;
// both a bounded number of times, and never past the context.
const (
	maxRateLimitRetries = 5
	maxRetryAfter       = 30 * time.Second
	conflictRetryFor    = 2 * time.Minute
)

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

// body makes a request body afresh for each attempt.
type body func() (io.ReadCloser, error)

func jsonBody(v any) (body, string, error) {
	if v == nil {
		return nil, "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", err
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, "application/json", nil
}

// send makes the request, retrying a 429 as its Retry-After headers ask,
// and returns a 2xx response (the caller closes its body) or an *APIError.
func (c *Client) send(ctx context.Context, method, u, ctype string, mk body) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if mk != nil {
			b, err := mk()
			if err != nil {
				return nil, err
			}
			defer b.Close()
			rd = b
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode/100 == 2 {
			return resp, nil
		}
		apiErr := readAPIError(resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || attempt >= maxRateLimitRetries {
			return nil, apiErr
		}
		if err := sleep(ctx, retryAfter(resp.Header, attempt)); err != nil {
			return nil, err
		}
	}
}

// readAPIError reads Daytona's error body (bounded).
func readAPIError(resp *http.Response) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	e := &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	var shape struct {
		StatusCode int    `json:"statusCode"`
		Message    any    `json:"message"`
		Code       string `json:"code"`
	}
	if json.Unmarshal(b, &shape) == nil && shape.Message != nil {
		e.Daytona = shape.StatusCode == resp.StatusCode
		switch m := shape.Message.(type) {
		case string:
			e.Message = m
		case []any:
			parts := make([]string, 0, len(m))
			for _, p := range m {
				parts = append(parts, fmt.Sprint(p))
			}
			e.Message = strings.Join(parts, "; ")
		default:
			e.Message = fmt.Sprint(m)
		}
		e.Code = shape.Code
	}
	if len(e.Message) > 512 {
		e.Message = e.Message[:512] + "…"
	}
	return e
}

// retryAfter reads the wait a 429 asks for. Daytona's rate limiter
// (NestJS throttler, one per limit: authenticated, sandbox create,
// lifecycle, list) names its header after the limit, Retry-After-<name>,
// and plain Retry-After may come too: the longest wins, capped at
// maxRetryAfter. Seconds or an HTTP date; without any, 1 s doubling.
func retryAfter(h http.Header, attempt int) time.Duration {
	var longest time.Duration
	found := false
	for name, vals := range h {
		if !strings.HasPrefix(strings.ToLower(name), "retry-after") {
			continue
		}
		for _, v := range vals {
			var d time.Duration
			if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s >= 0 {
				d = time.Duration(s * float64(time.Second))
			} else if t, err := http.ParseTime(v); err == nil {
				d = time.Until(t)
			} else {
				continue
			}
			found = true
			longest = max(longest, d)
		}
	}
	if !found {
		longest = time.Second << min(attempt, 5)
	}
	return min(max(longest, 0), maxRetryAfter)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// call sends a JSON request (in may be nil) and decodes a JSON answer into
// out (nil: discarded).
func (c *Client) call(ctx context.Context, method, u string, in, out any) error {
	mk, ctype, err := jsonBody(in)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, method, u, ctype, mk)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

// retryConflict runs fn until it does not fail with 409 (Daytona's
// "state change in progress" while a sandbox is pending), with a backoff
// growing from 100 ms to 1 s, for at most conflictRetryFor.
func retryConflict(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(conflictRetryFor)
	var b backoff
	for {
		err := fn()
		if statusOf(err) != http.StatusConflict || time.Now().After(deadline) {
			return err
		}
		if err := sleep(ctx, b.next()); err != nil {
			return err
		}
	}
}

// backoff is the official SDKs' polling interval: 100 ms, growing to 1 s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	switch {
	case b.d == 0:
		b.d = 100 * time.Millisecond
	case b.d < time.Second:
		b.d = min(b.d*3/2, time.Second)
	}
	return b.d
}

func esc(s string) string { return url.PathEscape(s) }

func (c *Client) sandboxURL(id, rest string) string { return c.base + "/sandbox/" + esc(id) + rest }

// Create is POST /sandbox.
func (c *Client) Create(ctx context.Context, req CreateSandbox) (Sandbox, error) {
	var sb Sandbox
	err := c.call(ctx, http.MethodPost, c.base+"/sandbox", req, &sb)
	return sb, err
}

// Get is GET /sandbox/{sandboxIdOrName}.
func (c *Client) Get(ctx context.Context, idOrName string) (Sandbox, error) {
	var sb Sandbox
	err := c.call(ctx, http.MethodGet, c.sandboxURL(idOrName, ""), nil, &sb)
	return sb, err
}

// listMaxPages bounds how many pages List follows (200 sandboxes each).
const listMaxPages = 50

// List is GET /sandbox?labels={json}: the sandboxes carrying all labels,
// page by page ({items, nextCursor}) up to listMaxPages. The list is
// eventually consistent: a sandbox just made may be missing.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	lb, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var out []Sandbox
	cursor := ""
	for range listMaxPages {
		q := url.Values{"labels": {string(lb)}, "limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items      []Sandbox `json:"items"`
			NextCursor *string   `json:"nextCursor"`
		}
		if err := c.call(ctx, http.MethodGet, c.base+"/sandbox?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" || *page.NextCursor == cursor {
			return out, nil
		}
		cursor = *page.NextCursor
	}
	return out, fmt.Errorf("daytona: the sandbox list has more than %d pages", listMaxPages)
}

// Delete is DELETE /sandbox/{sandboxIdOrName}, retried while Daytona
// answers 409 (a state change in progress).
func (c *Client) Delete(ctx context.Context, id string) error {
	return retryConflict(ctx, func() error { return c.call(ctx, http.MethodDelete, c.sandboxURL(id, ""), nil, nil) })
}

// Start is POST /sandbox/{id}/start: a stopped sandbox starts, an archived
// one restores; retried on 409.
func (c *Client) Start(ctx context.Context, id string) error {
	return retryConflict(ctx, func() error { return c.call(ctx, http.MethodPost, c.sandboxURL(id, "/start"), nil, nil) })
}

// Stop is POST /sandbox/{id}/stop, retried on 409. Daytona kills every
// process but its daemon (SIGKILL): end the runner's session first.
func (c *Client) Stop(ctx context.Context, id string) error {
	return retryConflict(ctx, func() error { return c.call(ctx, http.MethodPost, c.sandboxURL(id, "/stop"), nil, nil) })
}

// Archive is POST /sandbox/{id}/archive: a stopped sandbox moves to object
// storage; retried on 409.
func (c *Client) Archive(ctx context.Context, id string) error {
	return retryConflict(ctx, func() error { return c.call(ctx, http.MethodPost, c.sandboxURL(id, "/archive"), nil, nil) })
}

// SetAutoDelete is POST /sandbox/{id}/autodelete/{interval} (minutes;
// AutoDeleteDisabled turns it off).
func (c *Client) SetAutoDelete(ctx context.Context, id string, minutes int) error {
	return c.call(ctx, http.MethodPost, c.sandboxURL(id, "/autodelete/"+strconv.Itoa(minutes)), nil, nil)
}

// PreviewURL is GET /sandbox/{id}/ports/{port}/preview-url.
func (c *Client) PreviewURL(ctx context.Context, id string, port int) (PortPreviewURL, error) {
	var p PortPreviewURL
	err := c.call(ctx, http.MethodGet, c.sandboxURL(id, "/ports/"+strconv.Itoa(port)+"/preview-url"), nil, &p)
	return p, err
}

// ToolboxProxyURL is GET /sandbox/{id}/toolbox-proxy-url, for a record
// that came without toolboxProxyUrl.
func (c *Client) ToolboxProxyURL(ctx context.Context, id string) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	err := c.call(ctx, http.MethodGet, c.sandboxURL(id, "/toolbox-proxy-url"), nil, &out)
	return out.URL, err
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
	case notFound(err):
		code = provider.CodeNotFound
	case s == http.StatusConflict:
		code = provider.CodeConflict
	case s == http.StatusBadRequest:
		code = provider.CodeFailedPrecondition
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		code = provider.CodeFailedPrecondition
	case s == http.StatusTooManyRequests:
		code = provider.CodeUnavailable
	case s == 0 && errors.As(err, new(*url.Error)):
		code = provider.CodeUnavailable
	}
	return provider.Errorf(code, "%s: %v", what, err)
}
