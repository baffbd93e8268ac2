package controller

import (
	_ "embed"
	"net/http"
	"reflect"
	"slices"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/openapi"
	"github.com/tetherhq/tether/protocol"
)

//go:generate go run ./internal/openapigen openapi.json

// openAPIDoc is the API spec as committed (controller/openapi.json), written by go generate
// from apiOps and the api types; TestOpenAPIUpToDate fails when it differs from what they
// make now.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI renders the API spec (OpenAPI 3.1) from the routes' descriptions and the wire types.
func OpenAPI() ([]byte, error) {
	return openapi.Build(openapi.Info{
		Title:   "Tether controller API",
		Version: "1",
		Description: "The REST API of a Tether controller (tether serve). Every /v1 route but this document needs " +
			"Authorization: Bearer with the operator token (DATA/operator.token) or an API token (tether token create). " +
			"Every refusal is a JSON error {\"error\":{\"code\",\"message\"}} whose code is stable.",
		Default: "token",
		Security: map[string]openapi.Schema{
			"token": {"type": "http", "scheme": "bearer",
				"description": "the operator token or an API token; a token limited to workspaces finds every other one not_found"},
			"peer": {"type": "http", "scheme": "bearer",
				"description": "the cluster secret (tpeer_…), with X-Tether-Peer naming the calling controller: controllers only"},
			"runner": {"type": "http", "scheme": "bearer", "description": "a runner's session token: runners only"},
		},
		Errors:    openapi.Errors{Body: reflect.TypeFor[api.ErrorBody](), Statuses: errorStatuses()},
		Overrides: map[reflect.Type]openapi.Schema{reflect.TypeFor[protocol.Duration](): durationSchema},
	}, apiOps())
}

// durationSchema is protocol.Duration's JSON: written as "1m30s", read as that or nanoseconds.
var durationSchema = openapi.Schema{"type": []string{"string", "integer"},
	"description": "a duration: written as a Go duration string (1m30s); read as one or as nanoseconds"}

// errorStatuses are the statuses a typed error is answered with (writeError).
func errorStatuses() []int {
	out := []int{http.StatusInternalServerError}
	for _, st := range httpStatus {
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	slices.Sort(out)
	return out
}

// handleOpenAPI serves the spec. It needs no credential: it is the same for every controller
// of a version (it is in the source), names no workspace or secret, and a client reads it before
// it has a token, as a balancer reads /healthz.
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDoc)
}

// routeMux is the front ServeMux, remembering what it registers so a test can hold the spec to
// every route (those added later in Handler included).
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}
