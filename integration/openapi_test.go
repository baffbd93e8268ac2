package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// specProxy sits between a client and a real controller and checks every request and response
// against the controller's own API spec (GET /v1/openapi.json): JSON bodies whole; streams,
// upgrades and binary bodies by status, media type and headers.
type specProxy struct {
	t      *testing.T
	v      validator.Validator
	vmu    sync.Mutex // the validator's caches are not made for concurrent use
	srv    *httptest.Server
	mu     sync.Mutex
	failed []string
	seen   map[string]bool // "METHOD status path" of every exchange checked
}

type inboundKey struct{}

func newSpecProxy(t *testing.T, controllerURL string) *specProxy {
	t.Helper()
	resp, err := http.Get(controllerURL + "/v1/openapi.json") // no token: the spec is public
	if err != nil {
		t.Fatal(err)
	}
	spec, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: %v %s", err, resp.Status)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		t.Fatalf("the served spec is not a valid OpenAPI document: %v", errs)
	}
	p := &specProxy{t: t, v: v, seen: map[string]bool{}}
	target, err := url.Parse(controllerURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval:  -1, // streams (logs, watch) pass at once
		ModifyResponse: p.checkResponse,
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := p.checkRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), inboundKey{}, in)))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// maxChecked bounds the bodies the proxy holds to check them.
const maxChecked = 16 << 20

// checkRequest validates r (its JSON body read and put back) and returns a copy of it for the
// response's check.
func (p *specProxy) checkRequest(r *http.Request) (*http.Request, error) {
	var body []byte
	if isJSON(r.Header.Get("Content-Type")) {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, maxChecked)); err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	in := r.Clone(r.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	p.vmu.Lock()
	ok, errs := p.v.ValidateHttpRequestSync(in)
	p.vmu.Unlock()
	if !ok {
		p.fail("request %s %s: %s", r.Method, r.URL.RequestURI(), describe(errs))
	}
	in.Body = io.NopCloser(bytes.NewReader(body))
	return in, nil
}

// checkResponse validates the controller's answer to the request it carries.
func (p *specProxy) checkResponse(resp *http.Response) error {
	in, _ := resp.Request.Context().Value(inboundKey{}).(*http.Request)
	if in == nil {
		return errors.New("spec proxy: response without its request")
	}
	if err := p.check(in, resp); err != nil {
		p.fail("%v", err)
	}
	return nil
}

// check validates resp as the answer to in: a JSON body is read whole (and put back), any other
// body is left to stream and only its status, media type and headers are checked.
func (p *specProxy) check(in *http.Request, resp *http.Response) error {
	shown := *resp
	shown.Body = http.NoBody
	if isJSON(resp.Header.Get("Content-Type")) && resp.StatusCode != http.StatusSwitchingProtocols {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxChecked))
		resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		shown.Body = io.NopCloser(bytes.NewReader(b))
	}
	p.vmu.Lock()
	ok, errs := p.v.ValidateHttpResponse(in, &shown)
	p.vmu.Unlock()
	p.mu.Lock()
	p.seen[fmt.Sprintf("%s %d %s", in.Method, resp.StatusCode, in.URL.EscapedPath())] = true
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("response %s to %s %s: %s", resp.Status, in.Method, in.URL.RequestURI(), describe(errs))
	}
	return nil
}

func (p *specProxy) fail(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = append(p.failed, fmt.Sprintf(format, args...))
}

func (p *specProxy) failures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failed)
}

func (p *specProxy) statuses() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for k := range p.seen {
		out[k] = true
	}
	return out
}

func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json"
}

func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		for _, se := range e.SchemaValidationErrors {
			s += "; " + se.FieldPath + ": " + se.Reason
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// TestOpenAPITraffic drives a realistic workload through the Go client, via a proxy that checks
// every exchange against the spec the controller serves, and fails on any that does not match.
func TestOpenAPITraffic(t *testing.T) {
	c := startController(t, serveOpts{})
	p := newSpecProxy(t, c.Addr)
	cl, err := client.New(p.srv.URL, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error, code protocol.Code) {
		t.Helper()
		if protocol.CodeOf(err) != code {
			t.Fatalf("%s: got %v, want %s", what, err, code)
		}
	}

	_, err = cl.ListProviders(ctx)
	must("providers", err)
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "spec", Provider: "local"})
	must("create", err)
	_, err = cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "spec", Provider: "local"})
	refused("create a second workspace of the same name", err, protocol.CodeExists)
	_, err = cl.GetWorkspace(ctx, "no-such-workspace")
	refused("get a missing workspace", err, protocol.CodeNotFound)
	_, err = cl.ListWorkspaces(ctx, true)
	must("list", err)
	_, err = cl.GetWorkspace(ctx, ws.ID)
	must("get", err)

	// Files: write, read whole and ranged, stat, list, mkdir, rename, chmod, remove.
	content := "hello, spec\n"
	_, err = cl.WriteFile(ctx, ws.ID, "dir/a.txt", strings.NewReader(content), client.WriteOptions{})
	if err == nil {
		t.Fatal("a write under a missing directory was accepted")
	}
	_, err = cl.Mkdir(ctx, ws.ID, "dir", true, 0o755)
	must("mkdir", err)
	_, err = cl.WriteFile(ctx, ws.ID, "dir/a.txt", strings.NewReader(content), client.WriteOptions{Size: int64(len(content))})
	must("write", err)
	var got bytes.Buffer
	_, err = cl.ReadFile(ctx, ws.ID, "dir/a.txt", &got, client.ReadOptions{})
	must("read", err)
	if got.String() != content {
		t.Fatalf("read %q, wrote %q", got.String(), content)
	}
	_, err = cl.ReadFile(ctx, ws.ID, "dir/a.txt", io.Discard, client.ReadOptions{Offset: 2, Length: 3})
	must("ranged read", err)
	_, err = cl.ReadFile(ctx, ws.ID, "dir/missing", io.Discard, client.ReadOptions{})
	refused("read a missing file", err, protocol.CodeNotFound)
	_, err = cl.StatFile(ctx, ws.ID, "dir/a.txt")
	must("stat", err)
	_, err = cl.ListFiles(ctx, ws.ID, "dir", "", 10)
	must("list files", err)
	_, err = cl.Rename(ctx, ws.ID, "dir/a.txt", "dir/b.txt", false)
	must("rename", err)
	_, err = cl.Chmod(ctx, ws.ID, "dir/b.txt", 0o600)
	must("chmod", err)
	_, err = cl.WriteFile(ctx, ws.ID, "../escape", strings.NewReader("x"), client.WriteOptions{})
	if err == nil {
		t.Fatal("a write outside the workspace was accepted")
	}

	// A run: exec, its record, its log, wait.
	var out bytes.Buffer
	res, err := cl.ExecRun(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "echo out; echo err >&2; cat dir/b.txt"}},
		client.ExecIO{Stdout: &out, Stderr: io.Discard})
	must("exec", err)
	if res.Exit.ExitCode != 0 || !strings.Contains(out.String(), content) {
		t.Fatalf("exec: exit %+v, stdout %q", res.Exit, out.String())
	}
	_, err = cl.ListRuns(ctx, ws.ID)
	must("runs", err)
	_, err = cl.GetRun(ctx, res.RunID)
	must("run show", err)
	_, err = cl.RunLogs(ctx, res.RunID, client.RunLogsOptions{}, io.Discard, io.Discard)
	must("run logs", err)
	_, err = cl.WaitRun(ctx, res.RunID)
	must("run wait", err)
	_, err = cl.SignalRun(ctx, res.RunID, "TERM")
	refused("signal an ended run", err, protocol.CodeConflict)

	// A lease: acquire, a second holder refused, show, renew, a write under it, release.
	lease, err := cl.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "spec-a", TTL: "1m"})
	must("lease", err)
	_, err = cl.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "spec-b"})
	refused("a second holder", err, protocol.CodeLeaseHeld)
	_, err = cl.WriteFile(ctx, ws.ID, "dir/c.txt", strings.NewReader("c"), client.WriteOptions{})
	refused("a write without the epoch", err, protocol.CodeLeaseHeld)
	_, err = cl.WithEpoch(lease.Epoch).WriteFile(ctx, ws.ID, "dir/c.txt", strings.NewReader("c"), client.WriteOptions{})
	must("a write with the epoch", err)
	_, err = cl.GetLease(ctx, ws.ID)
	must("lease show", err)
	_, err = cl.RenewLease(ctx, ws.ID, api.LeaseRequest{Holder: "spec-a", Epoch: lease.Epoch, TTL: "1m"})
	must("lease renew", err)
	must("lease release", cl.ReleaseLease(ctx, ws.ID, lease.Epoch))
	_, err = cl.GetLease(ctx, ws.ID)
	refused("lease show with none", err, protocol.CodeNotFound)
	must("remove", cl.WithEpoch(0).Remove(ctx, ws.ID, "dir/c.txt", false))

	// Snapshots.
	snap, err := cl.CreateSnapshot(ctx, ws.ID)
	must("snapshot", err)
	_, err = cl.ListSnapshots(ctx, ws.ID)
	must("snapshots", err)
	_, err = cl.GetSnapshot(ctx, snap.ID)
	must("snapshot show", err)
	_, err = cl.VerifySnapshot(ctx, snap.ID)
	must("verify", err)
	_, err = cl.GetSnapshot(ctx, "snap_missing")
	refused("a missing snapshot", err, protocol.CodeNotFound)

	_, err = cl.ExportSnapshot(ctx, snap.ID, io.Discard)
	must("snapshot archive", err)

	// Streams: a tree export (its trailer passed through), a watch, a service's log.
	ex, err := cl.ExportTree(ctx, ws.ID, "dir", "")
	must("tree export", err)
	_, err = io.Copy(io.Discard, ex)
	must("tree export body", err)
	ex.Close()
	watch, err := cl.Watch(ctx, ws.ID, "dir", false)
	must("watch", err)
	_, err = cl.WriteFile(ctx, ws.ID, "dir/watched.txt", strings.NewReader("w"), client.WriteOptions{})
	must("write a watched file", err)
	_, err = watch.Next()
	must("watch event", err)
	watch.Close()
	_, err = cl.StartService(ctx, ws.ID, protocol.ServiceSpec{Name: "svc", Argv: []string{"sh", "-c", "echo up; exec sleep 600"}, Ready: "none"})
	must("service start", err)
	_, err = cl.ListServices(ctx, ws.ID)
	must("services", err)
	_, err = cl.ServiceLogs(ctx, ws.ID, "svc", 0, false, io.Discard)
	must("service logs", err)
	_, err = cl.StopService(ctx, ws.ID, "svc")
	must("service stop", err)

	// A resumable upload in two chunks.
	data := strings.Repeat("u", 1000)
	sum := sha256.Sum256([]byte(data))
	up, err := cl.CreateUpload(ctx, ws.ID, api.UploadCreate{Path: "dir/up.bin", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	must("upload", err)
	_, err = cl.PutUploadChunk(ctx, ws.ID, up.ID, 0, strings.NewReader(data[:400]), 400)
	must("upload chunk", err)
	_, err = cl.GetUpload(ctx, ws.ID, up.ID)
	must("upload show", err)
	_, err = cl.PutUploadChunk(ctx, ws.ID, up.ID, 400, strings.NewReader(data[400:]), 600)
	must("last upload chunk", err)
	_, err = cl.ListUploads(ctx, ws.ID, "", "")
	must("uploads", err)

	// Tokens, artifacts, events, storage.
	tok, err := cl.CreateToken(ctx, api.CreateTokenRequest{Name: "spec", Workspaces: []string{ws.ID}, TTL: "1h"})
	must("token", err)
	_, err = cl.CreateToken(ctx, api.CreateTokenRequest{Name: "spec"})
	refused("a token of the same name", err, protocol.CodeExists)
	_, err = cl.ListTokens(ctx)
	must("tokens", err)
	limited, err := client.New(p.srv.URL, tok.Token)
	must("limited client", err)
	_, err = limited.ListProviders(ctx)
	refused("a limited token asking for providers", err, protocol.CodeUnauthorized)
	must("revoke token", cl.RevokeToken(ctx, "spec"))
	art, err := cl.PutArtifact(ctx, ws.ID, "notes", strings.NewReader("artifact bytes"))
	must("artifact", err)
	_, err = cl.ListArtifacts(ctx, ws.ID)
	must("artifacts", err)
	_, err = cl.GetArtifact(ctx, art.ID)
	must("artifact show", err)
	_, err = cl.ListEvents(ctx, ws.ID)
	must("events", err)
	_, err = cl.StorageUsage(ctx)
	must("storage", err)

	// Close (a check first), then the files of the saved copy.
	var chk api.CloseCheck
	must("close check", cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{Check: true}, &chk))
	var closed api.CloseResult
	must("close", cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{}, &closed))
	got.Reset()
	rr, err := cl.ReadFile(ctx, ws.ID, "dir/b.txt", &got, client.ReadOptions{})
	must("read the saved copy", err)
	if rr.Source != protocol.SourceSaved || got.String() != content {
		t.Fatalf("saved read: source %q, %q", rr.Source, got.String())
	}
	_, err = cl.ExecRun(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"true"}}, client.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil {
		t.Fatal("exec in a closed workspace was accepted")
	}

	p.refusesUndescribed(t, c, ws.ID)

	// Every exchange above matched the spec, and there were enough of them to mean it.
	for _, f := range p.failures() {
		t.Error(f)
	}
	seen := p.statuses()
	for _, want := range []string{
		"POST 201 /v1/workspaces", "POST 409 /v1/workspaces", "GET 404 /v1/workspaces/no-such-workspace",
		"PUT 201 /v1/workspaces/" + ws.ID + "/files/dir%2Fa.txt", "GET 206 /v1/workspaces/" + ws.ID + "/files/dir%2Fa.txt",
		"GET 101 /v1/workspaces/" + ws.ID + "/exec", "POST 423 /v1/workspaces/" + ws.ID + "/lease",
		"POST 201 /v1/workspaces/" + ws.ID + "/snapshots", "GET 401 /v1/providers",
		"GET 200 /v1/workspaces/" + ws.ID + "/tree", "GET 200 /v1/workspaces/" + ws.ID + "/watch",
		"GET 200 /v1/workspaces/" + ws.ID + "/services/svc/logs", "PUT 201 /v1/workspaces/" + ws.ID + "/uploads/" + up.ID,
	} {
		if !seen[want] {
			t.Errorf("the workload never checked %s; checked: %v", want, slices.Sorted(maps.Keys(seen)))
		}
	}
}

// refusesUndescribed shows the check can fail: a real answer passes it, and the same answer
// with a field, a status or a media type the spec does not describe fails it.
func (p *specProxy) refusesUndescribed(t *testing.T, c *controllerProc, id string) {
	t.Helper()
	in, err := http.NewRequest(http.MethodGet, c.Addr+"/v1/workspaces/"+url.PathEscape(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(in)
	if err != nil {
		t.Fatal(err)
	}
	real, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET workspace: %v %s", err, resp.Status)
	}
	var fields map[string]any
	if err := json.Unmarshal(real, &fields); err != nil {
		t.Fatal(err)
	}
	with := func(change func(map[string]any)) []byte {
		m := maps.Clone(fields)
		change(m)
		b, _ := json.Marshal(m)
		return b
	}
	answer := func(status int, ct string, body []byte) *http.Response {
		return &http.Response{StatusCode: status, Status: fmt.Sprint(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
	}
	if err := p.check(in, answer(http.StatusOK, "application/json", real)); err != nil {
		t.Fatalf("the controller's own answer fails the check: %v", err)
	}
	for what, r := range map[string]*http.Response{
		"a field the spec does not have":      answer(http.StatusOK, "application/json", with(func(m map[string]any) { m["surprise"] = 1 })),
		"a required field missing":            answer(http.StatusOK, "application/json", with(func(m map[string]any) { delete(m, "id") })),
		"a field of the wrong type":           answer(http.StatusOK, "application/json", with(func(m map[string]any) { m["epoch"] = "one" })),
		"a status the spec does not have":     answer(http.StatusAccepted, "application/json", real),
		"a media type the spec does not have": answer(http.StatusOK, "text/plain", real),
		"an error body that is not typed":     answer(http.StatusNotFound, "application/json", []byte(`{"message":"gone"}`)),
	} {
		if err := p.check(in, r); err == nil {
			t.Errorf("%s passed the check", what)
		}
	}
	// Requests too: a body field the spec does not have, a route it does not have.
	for what, r := range map[string]*http.Request{
		"a request field the spec does not have": httptest.NewRequest(http.MethodPost, c.Addr+"/v1/workspaces", strings.NewReader(`{"surprise":1}`)),
		"a route the spec does not have":         httptest.NewRequest(http.MethodGet, c.Addr+"/v1/nowhere", nil),
	} {
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+c.Token)
		before := len(p.failures())
		if _, err := p.checkRequest(r); err != nil {
			t.Fatal(err)
		}
		if len(p.failures()) == before {
			t.Errorf("%s passed the check", what)
		} else {
			p.mu.Lock()
			p.failed = p.failed[:before] // expected: not a failure of the workload
			p.mu.Unlock()
		}
	}
}
