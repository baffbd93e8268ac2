package daytona_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/tetherhq/tether/plugins/daytona"
	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/plugins/provider"
)

// specs are Daytona's published documents (testdata/README.md) with a
// router each; api.json is OpenAPI 3.0, toolbox.json Swagger 2.0
// (converted to 3 to validate).
type specs struct {
	api, tb             *openapi3.T
	apiRouter, tbRouter routers.Router
	facts               specFacts
}

type specOp struct {
	Spec     string   `json:"spec"`
	Method   string   `json:"method"`
	Path     string   `json:"path"`
	Success  []int    `json:"success"`
	Query    []string `json:"query"`
	Response string   `json:"response"`
}

type specFacts struct {
	Source struct {
		Repository, Commit, Version string
	} `json:"source"`
	Operations      []specOp `json:"operations"`
	Removed         []specOp `json:"removed"`
	SandboxRequired []string `json:"sandboxRequired"`
	CreateResources []string `json:"createResources"`
	CreateBuildInfo struct {
		Field, Schema string
		Required      []string
	} `json:"createBuildInfo"`
	ListPage struct {
		Schema   string
		Required []string
	} `json:"listPage"`
	ToolboxError struct {
		Schema   string
		Required []string
	} `json:"toolboxError"`
	APIErrorBody struct {
		Required []string
	} `json:"apiErrorBody"`
}

// loadSpecs parses the documents once for the package's tests (the
// validator's documents are read-only once loaded).
var loadSpecs = sync.OnceValues(func() (*specs, error) {
	var s specs
	b, err := os.ReadFile(filepath.Join("testdata", "spec-facts.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.facts); err != nil {
		return nil, err
	}
	apiJSON, err := os.ReadFile(filepath.Join("testdata", "api.json"))
	if err != nil {
		return nil, err
	}
	if s.api, err = openapi3.NewLoader().LoadFromData(apiJSON); err != nil {
		return nil, fmt.Errorf("api.json: %w", err)
	}
	tbJSON, err := os.ReadFile(filepath.Join("testdata", "toolbox.json"))
	if err != nil {
		return nil, err
	}
	var v2 openapi2.T
	if err := json.Unmarshal(tbJSON, &v2); err != nil {
		return nil, fmt.Errorf("toolbox.json: %w", err)
	}
	if s.tb, err = openapi2conv.ToV3(&v2); err != nil {
		return nil, fmt.Errorf("toolbox.json to OpenAPI 3: %w", err)
	}
	if s.apiRouter, err = s.router(s.api, "api"); err != nil {
		return nil, err
	}
	if s.tbRouter, err = s.router(s.tb, "toolbox"); err != nil {
		return nil, err
	}
	return &s, nil
})

// router routes the operations spec-facts.json names, by path alone (the
// fake's addresses are not the documents' servers). A request for any
// other operation finds no route. (The whole api.json does not pass
// kin-openapi's document check: it has paths only their parameter names
// tell apart, such as /sandbox/{sandboxId}/secrets and
// /sandbox/{sandboxIdOrName}/secrets.)
func (s *specs) router(full *openapi3.T, spec string) (routers.Router, error) {
	doc := *full
	doc.Servers = nil
	doc.Paths = openapi3.NewPaths()
	for _, o := range s.facts.Operations {
		if o.Spec != spec {
			continue
		}
		item := full.Paths.Find(o.Path)
		if item == nil || item.GetOperation(o.Method) == nil {
			return nil, fmt.Errorf("%s %s %s is not in the spec", spec, o.Method, o.Path)
		}
		into := doc.Paths.Value(o.Path)
		if into == nil {
			into = &openapi3.PathItem{Parameters: item.Parameters}
			doc.Paths.Set(o.Path, into)
		}
		into.SetOperation(o.Method, item.GetOperation(o.Method))
	}
	return legacy.NewRouter(&doc, openapi3.DisableExamplesValidation())
}

func mustSpecs(t testing.TB) *specs {
	t.Helper()
	s, err := loadSpecs()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// check validates one exchange: the request against its operation, the
// answer against the operation's response for its status, or, for an
// error the operation does not list, against the error body Daytona sends.
// The operation must be one spec-facts.json names.
func (s *specs) check(ex fake.Exchange) error {
	router, spec := s.apiRouter, "api"
	if ex.Toolbox {
		router, spec = s.tbRouter, "toolbox"
	}
	target := ex.SpecPath
	if _, q, ok := strings.Cut(ex.URL, "?"); ok {
		target += "?" + q
	}
	req, err := http.NewRequest(ex.Method, "http://fake"+target, bytes.NewReader(ex.Body))
	if err != nil {
		return err
	}
	req.Header = ex.Header.Clone()
	route, params, err := router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: no such operation in %s spec: %v", ex.Method, ex.SpecPath, spec, err)
	}
	if !slices.ContainsFunc(s.facts.Operations, func(o specOp) bool {
		return o.Spec == spec && o.Method == ex.Method && o.Path == route.Path
	}) {
		return fmt.Errorf("%s %s (%s %s) is not in testdata/spec-facts.json", ex.Method, ex.SpecPath, spec, route.Path)
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if ex.Status != http.StatusUnauthorized && ex.Status != http.StatusTooManyRequests {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("request %s %s: %v", ex.Method, ex.SpecPath, err)
		}
	}
	if route.Operation.Responses.Status(ex.Status) == nil && ex.Status >= 400 {
		return s.checkError(ex, spec)
	}
	ctype, _, _ := mime.ParseMediaType(ex.RespHeader.Get("Content-Type"))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ex.Status, Header: ex.RespHeader,
		Body: io.NopCloser(bytes.NewReader(ex.RespBody)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
			ExcludeResponseBody: ex.Truncated || ctype == "application/octet-stream"}}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("response %d to %s %s: %v", ex.Status, ex.Method, ex.SpecPath, err)
	}
	return nil
}

// checkError checks an error answer the operation does not list: the
// toolbox's ErrorResponse, or the API's {statusCode, message, error}.
func (s *specs) checkError(ex fake.Exchange, spec string) error {
	var body map[string]any
	if err := json.Unmarshal(ex.RespBody, &body); err != nil {
		return fmt.Errorf("error %d to %s %s is not JSON: %v", ex.Status, ex.Method, ex.SpecPath, err)
	}
	if spec == "toolbox" {
		schema := s.tb.Components.Schemas[s.facts.ToolboxError.Schema]
		if schema == nil {
			return fmt.Errorf("toolbox spec has no %s", s.facts.ToolboxError.Schema)
		}
		var v any
		_ = json.Unmarshal(ex.RespBody, &v)
		if err := schema.Value.VisitJSON(v); err != nil {
			return fmt.Errorf("error %d to %s %s: %v", ex.Status, ex.Method, ex.SpecPath, err)
		}
		return nil
	}
	for _, f := range s.facts.APIErrorBody.Required {
		if _, ok := body[f]; !ok {
			return fmt.Errorf("error %d to %s %s lacks %s: %s", ex.Status, ex.Method, ex.SpecPath, f, ex.RespBody)
		}
	}
	if code, _ := body["statusCode"].(float64); int(code) != ex.Status {
		return fmt.Errorf("error %d to %s %s says statusCode %v", ex.Status, ex.Method, ex.SpecPath, body["statusCode"])
	}
	return nil
}

// The facts the tests rely on are what the documents say.
func TestSpecFacts(t *testing.T) {
	s := mustSpecs(t)
	if s.facts.Source.Commit != "d94a128" || s.facts.Source.Version != "v0.205.1" || s.facts.Source.Repository != "daytona/clients" {
		t.Errorf("spec-facts.json names source %+v", s.facts.Source)
	}
	for _, o := range s.facts.Operations {
		doc := map[string]*openapi3.T{"api": s.api, "toolbox": s.tb}[o.Spec]
		item := doc.Paths.Find(o.Path)
		if item == nil || item.GetOperation(o.Method) == nil {
			t.Errorf("%s %s %s: not in the spec", o.Spec, o.Method, o.Path)
			continue
		}
		op := item.GetOperation(o.Method)
		for _, st := range o.Success {
			if op.Responses.Status(st) == nil {
				t.Errorf("%s %s %s: the spec does not answer %d", o.Spec, o.Method, o.Path, st)
			}
		}
		for _, q := range o.Query {
			if op.Parameters.GetByInAndName("query", q) == nil {
				t.Errorf("%s %s %s: no query parameter %s", o.Spec, o.Method, o.Path, q)
			}
		}
		if o.Response != "" && s.api.Components.Schemas[o.Response] == nil {
			t.Errorf("%s %s %s: no schema %s", o.Spec, o.Method, o.Path, o.Response)
		}
	}
	for _, o := range s.facts.Removed {
		doc := map[string]*openapi3.T{"api": s.api, "toolbox": s.tb}[o.Spec]
		if item := doc.Paths.Find(o.Path); item != nil && item.GetOperation(o.Method) != nil {
			t.Errorf("%s %s %s is listed as removed but the spec has it", o.Spec, o.Method, o.Path)
		}
	}
	required := func(doc *openapi3.T, schema string) []string {
		ref := doc.Components.Schemas[schema]
		if ref == nil {
			t.Fatalf("no schema %s", schema)
		}
		return slices.Sorted(slices.Values(ref.Value.Required))
	}
	if got, want := required(s.api, "Sandbox"), slices.Sorted(slices.Values(s.facts.SandboxRequired)); !slices.Equal(got, want) {
		t.Errorf("Sandbox requires %v; spec-facts says %v", got, want)
	}
	if got := required(s.api, s.facts.ListPage.Schema); !slices.Equal(got, slices.Sorted(slices.Values(s.facts.ListPage.Required))) {
		t.Errorf("%s requires %v", s.facts.ListPage.Schema, got)
	}
	if got := required(s.tb, s.facts.ToolboxError.Schema); !slices.Equal(got, slices.Sorted(slices.Values(s.facts.ToolboxError.Required))) {
		t.Errorf("%s requires %v", s.facts.ToolboxError.Schema, got)
	}
	if got := required(s.api, s.facts.CreateBuildInfo.Schema); !slices.Equal(got, s.facts.CreateBuildInfo.Required) {
		t.Errorf("%s requires %v", s.facts.CreateBuildInfo.Schema, got)
	}
	create := s.api.Components.Schemas["CreateSandbox"].Value
	for _, f := range append(slices.Clone(s.facts.CreateResources), s.facts.CreateBuildInfo.Field) {
		if create.Properties[f] == nil {
			t.Errorf("CreateSandbox has no %s", f)
		}
	}
}

// Every state of the spec's SandboxState maps to a provider state: a
// state Daytona adds fails here until states.go maps it.
func TestEveryStateMapped(t *testing.T) {
	s := mustSpecs(t)
	enum := s.api.Components.Schemas["SandboxState"].Value.Enum
	if len(enum) < 20 {
		t.Fatalf("SandboxState has %d states", len(enum))
	}
	for _, v := range enum {
		st, ok := daytona.MapState(v.(string))
		if !ok {
			t.Errorf("Daytona state %q is not mapped", v)
		}
		if st == provider.StateGone && v != daytona.StateDestroyed && v != daytona.StateDestroying {
			t.Errorf("%q maps to gone", v)
		}
	}
	for _, v := range []string{"paused", "pausing", "resuming", "resizing", "snapshotting", "forking", "pulling_snapshot",
		"pending_build", "building_snapshot", "unknown", "restoring", "archiving", "archived", "error", "build_failed", "destroying", "destroyed"} {
		if !slices.Contains(enum, any(v)) {
			t.Errorf("the spec no longer has state %q", v)
		}
	}
	if _, ok := daytona.MapState("no-such-state"); ok {
		t.Error("an unknown state maps")
	}
}

// The validator fails: requests and answers that break the spec are
// refused.
func TestSpecValidatorRejects(t *testing.T) {
	s := mustSpecs(t)
	okSandbox := `{"id":"a","organizationId":"o","name":"n","user":"u","env":{},"labels":{},"public":false,"networkBlockAll":false,` +
		`"target":"us","cpu":1,"gpu":0,"memory":1,"disk":3,"state":"started","toolboxProxyUrl":"http://x/toolbox"}`
	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	good := fake.Exchange{Method: "GET", URL: "/sandbox/a", SpecPath: "/sandbox/a", Header: http.Header{}, Status: 200, RespHeader: jsonHdr, RespBody: []byte(okSandbox)}
	if err := s.check(good); err != nil {
		t.Fatalf("a good exchange is refused: %v", err)
	}
	bad := map[string]fake.Exchange{}
	e := good
	e.RespBody = []byte(strings.Replace(okSandbox, `,"toolboxProxyUrl":"http://x/toolbox"`, "", 1))
	bad["answer without a required field"] = e
	e = good
	e.RespBody = []byte(strings.Replace(okSandbox, `"started"`, `"running"`, 1))
	bad["answer with a state not in the enum"] = e
	e = good
	e.Method, e.URL, e.SpecPath, e.Header, e.Body = "POST", "/sandbox", "/sandbox", jsonHdr, []byte(`{"cpu":"two"}`)
	bad["request with a string cpu"] = e
	e = good
	e.URL, e.SpecPath = "/sandbox/a/nowhere", "/sandbox/a/nowhere"
	bad["path not in the spec"] = e
	e = good
	e.Status, e.RespBody = 409, []byte(`{"message":"busy"}`)
	bad["API error without statusCode"] = e
	e = fake.Exchange{Toolbox: true, Method: "GET", URL: "/toolbox/a/files?path=/x", SpecPath: "/files", Header: http.Header{},
		Status: 404, RespHeader: jsonHdr, RespBody: []byte(`{"message":"no"}`)}
	bad["toolbox error without path and timestamp"] = e
	e = fake.Exchange{Toolbox: true, Method: "POST", URL: "/toolbox/a/files/upload", SpecPath: "/files/upload", Header: http.Header{}, Status: 200}
	bad["the old upload path"] = e
	e = fake.Exchange{Toolbox: true, Method: "GET", URL: "/toolbox/a/project-dir", SpecPath: "/project-dir", Header: http.Header{}, Status: 200}
	bad["the project-dir alias"] = e
	for name, ex := range bad {
		if err := s.check(ex); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: refused: %v", name, err)
		}
	}
}
