package controller

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// TestOpenAPIUpToDate: the committed spec is what the routes' descriptions and the wire types
// make now (run go generate ./controller after changing either).
func TestOpenAPIUpToDate(t *testing.T) {
	doc, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, openAPIDoc) {
		t.Fatal("controller/openapi.json is stale: run go generate ./controller")
	}
}

// TestOpenAPIDocumentValid: the spec is a valid OpenAPI 3.1 document (checked against the
// specification's own schema).
func TestOpenAPIDocumentValid(t *testing.T) {
	v := specValidator(t)
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s", e.Message, e.Reason)
		}
	}
}

func specValidator(t *testing.T) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(openAPIDoc)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	return v
}

// TestOpenAPIRoutes holds the spec and the server's routes to each other, both ways: every
// path and method the spec names is routed by the server's own patterns to a registered route,
// and every registered route (any method, for a pattern without one) is reached by one of them.
func TestOpenAPIRoutes(t *testing.T) {
	tc := newTestController(t)
	front, _ := tc.s.apiMux()
	// The operator API is one mount (/v1/) of a mux of its own: its routes stand in for it.
	var registered []string
	for _, p := range front.patterns {
		if p != "/v1/" {
			registered = append(registered, p)
		}
	}
	if !slices.Contains(front.patterns, "/v1/") {
		t.Fatal("Handler no longer mounts the operator API at /v1/: update this test")
	}
	for _, rt := range tc.s.routes() {
		registered = append(registered, rt.pattern)
	}
	// A mux of the same patterns, each answering with its own: which route a request reaches.
	probe := http.NewServeMux()
	for _, p := range registered {
		probe.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Pattern) })
	}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &spec); err != nil {
		t.Fatal(err)
	}
	reached := map[string][]string{} // pattern → methods that reach it
	for path, item := range spec.Paths {
		for method := range item {
			m := strings.ToUpper(method)
			u := "http://controller" + fillPath(path)
			req := httptest.NewRequest(m, u, nil)
			rec := httptest.NewRecorder()
			probe.ServeHTTP(rec, req)
			got := rec.Body.String()
			if rec.Code != http.StatusOK || !slices.Contains(registered, got) {
				t.Errorf("spec has %s %s, but the server routes it nowhere (%d %s)", m, path, rec.Code, strings.TrimSpace(got))
				continue
			}
			reached[got] = append(reached[got], m)
		}
	}
	for _, p := range registered {
		methods := reached[p]
		if method, _, hasMethod := strings.Cut(p, " "); hasMethod {
			if !slices.Contains(methods, method) {
				t.Errorf("route %q is not in the spec", p)
			}
			continue
		}
		for _, m := range []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"} {
			if !slices.Contains(methods, m) {
				t.Errorf("route %q serves every method, but the spec has no %s", p, m)
			}
		}
	}
	// Each description is one route, and each route has one: a description of a pattern nobody
	// registers could otherwise hide behind another route that serves its path.
	described := map[string]bool{}
	for _, op := range apiOps() {
		if described[op.Pattern] {
			t.Errorf("route %q is described twice", op.Pattern)
		}
		described[op.Pattern] = true
	}
	for _, p := range registered {
		if !described[p] {
			t.Errorf("route %q has no description in apiOps", p)
		}
		delete(described, p)
	}
	for p := range described {
		t.Errorf("apiOps describes %q, which the server does not register", p)
	}
}

// fillPath puts sample values in a spec path's {params}: one escaped segment holding a slash
// for path-like ones, as clients send them.
func fillPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			switch s {
			case "{port}":
				segs[i] = "8080"
			case "{path}":
				segs[i] = url.PathEscape("a/b")
			default:
				segs[i] = "x1"
			}
		}
	}
	return strings.Join(segs, "/")
}

// TestOpenAPIServed: the spec is served without a credential, as committed.
func TestOpenAPIServed(t *testing.T) {
	tc := newTestController(t)
	resp, err := http.Get(tc.url + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, openAPIDoc) {
		t.Fatalf("GET /v1/openapi.json: %s %q, %d bytes (want the committed spec)", resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
	// Everything else under /v1/ still needs a token.
	resp, err = http.Get(tc.url + "/v1/workspaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/workspaces without a token: %s", resp.Status)
	}
}
