// Package openapi builds an OpenAPI 3.1 document from operations described in Go: their
// paths (http.ServeMux patterns), parameters, and request and response types, whose JSON
// schemas are derived by reflection from the Go types and their json tags, so the document
// describes what encoding/json actually reads and writes.
package openapi
