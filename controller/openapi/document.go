package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Op is one route: a method (or every method) on a path.
type Op struct {
	// Pattern is the route as the server's http.ServeMux has it: "GET /v1/x/{id}", or a path
	// alone for every method. A trailing {name...} wildcard becomes two paths: /x/{name} and
	// /x/ (the wildcard empty).
	Pattern     string
	ID          string // operationId (every method's gets the method appended)
	Tag         string
	Summary     string
	Description string
	// Auth names the security scheme; "" is the default (Bearer), None is no credential.
	Auth string
	// PathParams describe {name} wildcards; an undescribed one is a string.
	PathParams []Param
	Query      []Param
	Headers    []Param // request headers
	Body       *Body
	Responses  []Response
	// NoErrors leaves out the JSON error answers (a route whose refusals are not the API's).
	NoErrors bool
}

// Param is a path, query or header parameter.
type Param struct {
	Name        string
	Description string
	Type        string // string (default), integer, boolean
	Required    bool
	Repeated    bool // a query parameter that may be given more than once
}

// Body is a request body: JSON of a Go type, or bytes of a media type.
type Body struct {
	JSON        reflect.Type // JSON of this type (media type application/json)
	Media       string       // raw bytes of this media type when JSON is nil
	Required    bool
	Description string
}

// Response is one status an operation answers with.
type Response struct {
	Status      int // Default: every status not described otherwise
	Description string
	// JSON is the type of a JSON body; OneOf lists several the status may carry.
	JSON  reflect.Type
	OneOf []reflect.Type
	// Media lists raw body media types (beside or instead of JSON).
	Media   []string
	Headers []Param
}

// Errors describes the typed error answers every operation may give.
type Errors struct {
	Body     reflect.Type // the JSON of every error answer
	Statuses []int
}

// Info is the document's head.
type Info struct {
	Title, Version, Description string
	// Security are the schemes by name; Default is the one an operation without Auth needs.
	Security map[string]Schema
	Default  string
	Errors   Errors
	// Overrides are the schemas of types that encode themselves (json.Marshaler).
	Overrides map[reflect.Type]Schema
}

// Default is the Status of a response that stands for every status not otherwise described.
const Default = 0

// None is the Auth of an operation that needs no credential.
const None = "none"

// anyMethod are the methods a pattern without one serves (ServeMux matches them all).
var anyMethod = []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}

// Build renders the document as indented JSON, keys sorted, so equal input gives equal bytes.
func Build(info Info, ops []Op) ([]byte, error) {
	sc := &schemas{components: map[string]Schema{}, owners: map[string]reflect.Type{}, overrides: info.Overrides, required: true}
	// Responses first: every type they reach gets its required fields listed (see schemas).
	type built struct {
		op        Op
		responses map[string]any
	}
	var all []built
	errRef := sc.of(info.Errors.Body)
	for _, op := range ops {
		rs := map[string]any{}
		for _, r := range op.Responses {
			rs[statusKey(r.Status)] = response(sc, r)
		}
		if !op.NoErrors {
			for _, st := range info.Errors.Statuses {
				if _, ok := rs[strconv.Itoa(st)]; !ok {
					rs[strconv.Itoa(st)] = Schema{"$ref": "#/components/responses/" + errorName(st)}
				}
			}
		}
		all = append(all, built{op, rs})
	}
	sc.required = false
	paths := map[string]map[string]any{}
	for _, b := range all {
		op := b.op
		method, path, _ := strings.Cut(op.Pattern, " ")
		if path == "" {
			method, path = "", method
		}
		methods := []string{method}
		if method == "" {
			methods = anyMethod
		}
		for _, p := range specPaths(path) {
			for _, m := range methods {
				o := Schema{"operationId": opID(op.ID, m, method == "", p.root), "summary": op.Summary, "responses": b.responses}
				if op.Tag != "" {
					o["tags"] = []string{op.Tag}
				}
				if op.Description != "" {
					o["description"] = op.Description
				}
				switch op.Auth {
				case "":
				case None:
					o["security"] = []any{}
				default:
					if _, ok := info.Security[op.Auth]; !ok {
						return nil, fmt.Errorf("openapi: %s: no security scheme %q", op.Pattern, op.Auth)
					}
					o["security"] = []any{Schema{op.Auth: []string{}}}
				}
				params, err := parameters(op, p.params)
				if err != nil {
					return nil, err
				}
				if len(params) > 0 {
					o["parameters"] = params
				}
				if op.Body != nil {
					o["requestBody"] = requestBody(sc, *op.Body)
				}
				item := paths[p.path]
				if item == nil {
					item = map[string]any{}
					paths[p.path] = item
				}
				lm := strings.ToLower(m)
				if _, dup := item[lm]; dup {
					return nil, fmt.Errorf("openapi: %s %s is described twice", m, p.path)
				}
				item[lm] = o
			}
		}
	}
	if sc.err != nil {
		return nil, sc.err
	}
	errResponses := map[string]any{}
	for _, st := range info.Errors.Statuses {
		errResponses[errorName(st)] = Schema{
			"description": http.StatusText(st) + ": a typed error",
			"content":     Schema{"application/json": Schema{"schema": errRef}},
		}
	}
	doc := Schema{
		"openapi":  "3.1.0",
		"info":     Schema{"title": info.Title, "version": info.Version, "description": info.Description},
		"paths":    paths,
		"security": []any{Schema{info.Default: []string{}}},
		"components": Schema{
			"schemas":         sc.components,
			"responses":       errResponses,
			"securitySchemes": info.Security,
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func statusKey(status int) string {
	if status == Default {
		return "default"
	}
	return strconv.Itoa(status)
}

func errorName(status int) string { return "Error" + strconv.Itoa(status) }

func opID(id, method string, every, root bool) string {
	if every {
		id += strings.ToUpper(method[:1]) + strings.ToLower(method[1:])
	}
	if root {
		id += "Root"
	}
	return id
}

// specPath is one OpenAPI path of a pattern and the wildcards it has.
type specPath struct {
	path   string
	params []string
	root   bool // the trailing wildcard left empty
}

// specPaths turns a ServeMux path into OpenAPI paths: {name...} becomes {name}, and a pattern
// ending in one also matches its directory with the wildcard empty.
func specPaths(path string) []specPath {
	segs := strings.Split(path, "/")
	var params []string
	rest := false
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			name := strings.TrimSuffix(strings.Trim(s, "{}"), "...")
			rest = rest || strings.HasSuffix(s, "...}")
			params = append(params, name)
			segs[i] = "{" + name + "}"
		}
	}
	out := []specPath{{path: strings.Join(segs, "/"), params: params}}
	if rest {
		out = append(out, specPath{path: strings.Join(segs[:len(segs)-1], "/") + "/", params: params[:len(params)-1], root: true})
	}
	return out
}

func parameters(op Op, pathParams []string) ([]any, error) {
	var out []any
	for _, name := range pathParams {
		p := Param{Name: name}
		if i := slices.IndexFunc(op.PathParams, func(p Param) bool { return p.Name == name }); i >= 0 {
			p = op.PathParams[i]
		}
		out = append(out, param("path", p, true))
	}
	for _, p := range op.PathParams {
		if !slices.Contains(pathParams, p.Name) && !strings.HasSuffix(op.Pattern, "{"+p.Name+"...}") {
			return nil, fmt.Errorf("openapi: %s describes path parameter %s it does not have", op.Pattern, p.Name)
		}
	}
	for _, p := range op.Query {
		out = append(out, param("query", p, p.Required))
	}
	for _, p := range op.Headers {
		out = append(out, param("header", p, p.Required))
	}
	return out, nil
}

func param(in string, p Param, required bool) Schema {
	typ := p.Type
	if typ == "" {
		typ = "string"
	}
	s := Schema{"type": typ}
	if p.Repeated {
		s = Schema{"type": "array", "items": s}
	}
	out := Schema{"name": p.Name, "in": in, "required": required, "schema": s}
	if p.Description != "" {
		out["description"] = p.Description
	}
	if p.Repeated {
		out["style"], out["explode"] = "form", true
	}
	return out
}

func requestBody(sc *schemas, b Body) Schema {
	content := Schema{}
	if b.JSON != nil {
		content["application/json"] = Schema{"schema": sc.of(b.JSON)}
	} else {
		content[b.Media] = Schema{}
	}
	out := Schema{"required": b.Required, "content": content}
	if b.Description != "" {
		out["description"] = b.Description
	}
	return out
}

func response(sc *schemas, r Response) Schema {
	desc := r.Description
	if desc == "" && r.Status != Default {
		desc = http.StatusText(r.Status)
	}
	out := Schema{"description": desc}
	content := Schema{}
	switch {
	case r.JSON != nil:
		content["application/json"] = Schema{"schema": sc.of(r.JSON)}
	case len(r.OneOf) > 0:
		var alts []any
		for _, t := range r.OneOf {
			alts = append(alts, sc.of(t))
		}
		content["application/json"] = Schema{"schema": Schema{"oneOf": alts}}
	}
	for _, m := range r.Media {
		content[m] = Schema{}
	}
	if len(content) > 0 {
		out["content"] = content
	}
	if len(r.Headers) > 0 {
		hs := Schema{}
		for _, h := range r.Headers {
			typ := h.Type
			if typ == "" {
				typ = "string"
			}
			e := Schema{"schema": Schema{"type": typ}, "required": h.Required}
			if h.Description != "" {
				e["description"] = h.Description
			}
			hs[h.Name] = e
		}
		out["headers"] = hs
	}
	return out
}
