package openapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Schema is a JSON Schema (2020-12, the dialect of OpenAPI 3.1) as a JSON object.
type Schema = map[string]any

// schemas derives component schemas from Go types. A named struct becomes a component (its
// name is the Go type's); everything else is inlined where it is used.
type schemas struct {
	components map[string]Schema
	owners     map[string]reflect.Type // component name → the type that has it
	overrides  map[reflect.Type]Schema
	// required says whether a struct's fields without omitempty are listed as required. They are
	// for what the server writes (encoding/json always writes them); for what it reads they are
	// not, since its decoder takes an absent field as the zero value.
	required bool
	err      error
}

var (
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// of is the schema of t where a value of it is used: a pointer, slice or map may be null there
// (a Go nil), unless the field's omitempty drops it (see fields).
func (s *schemas) of(t reflect.Type) Schema {
	if o, ok := s.overrides[t]; ok {
		return o
	}
	switch t {
	case timeType:
		return Schema{"type": "string", "format": "date-time"}
	case rawType:
		// Any JSON value: encoding/json writes the raw message as it is.
		return Schema{}
	}
	if t.Kind() != reflect.Pointer && (t.Implements(marshalerType) || t.Implements(textType)) {
		s.fail(fmt.Errorf("openapi: %s encodes itself; give it an override", t))
		return Schema{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return nullable(s.of(t.Elem()))
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return Schema{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64:
		return Schema{"type": "integer", "format": "int64"}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return Schema{"type": "integer", "format": "int32", "minimum": 0}
	case reflect.Uint, reflect.Uint64:
		return Schema{"type": "integer", "format": "int64", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return nullable(Schema{"type": "string", "contentEncoding": "base64"})
		}
		return nullable(Schema{"type": "array", "items": s.of(t.Elem())})
	case reflect.Array:
		return Schema{"type": "array", "items": s.of(t.Elem()), "minItems": t.Len(), "maxItems": t.Len()}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			s.fail(fmt.Errorf("openapi: %s: map keys must be strings", t))
		}
		return nullable(Schema{"type": "object", "additionalProperties": s.of(t.Elem())})
	case reflect.Interface:
		return Schema{}
	case reflect.Struct:
		return s.ref(t)
	}
	s.fail(fmt.Errorf("openapi: %s has no JSON schema", t))
	return Schema{}
}

// ref names t's component, making it on first use.
func (s *schemas) ref(t reflect.Type) Schema {
	name := t.Name()
	if name == "" {
		return s.object(t)
	}
	if owner, ok := s.owners[name]; ok {
		if owner != t {
			s.fail(fmt.Errorf("openapi: %s and %s both want the schema name %s", owner, t, name))
		}
		return Schema{"$ref": "#/components/schemas/" + name}
	}
	s.owners[name] = t
	s.components[name] = Schema{} // taken before the fields, so a recursive type refers to it
	s.components[name] = s.object(t)
	return Schema{"$ref": "#/components/schemas/" + name}
}

// object is a struct's schema: its fields as encoding/json writes them (embedded structs
// flattened, "-" and unexported fields left out). Undeclared properties are refused: the
// server's decoder refuses unknown fields, and a response with one is a response the document
// does not describe.
func (s *schemas) object(t reflect.Type) Schema {
	props := map[string]any{}
	var required []string
	s.fields(t, props, &required)
	o := Schema{"type": "object", "properties": props, "additionalProperties": false}
	if s.required && len(required) > 0 {
		slices.Sort(required)
		o["required"] = required
	}
	return o
}

func (s *schemas) fields(t reflect.Type, props map[string]any, required *[]string) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := hasOpt(opts, "omitempty") || hasOpt(opts, "omitzero")
		switch {
		case hasOpt(opts, "string"):
			props[name] = Schema{"type": "string"}
		case omit && nilable(f.Type):
			// Never written as null: omitempty drops a nil (and an empty slice or map).
			props[name] = notNull(s.of(f.Type))
		default:
			props[name] = s.of(f.Type)
		}
		if !omit {
			*required = append(*required, name)
		}
	}
	// An embedded struct's fields are promoted unless the outer struct has one of that name.
	for _, et := range embedded {
		inner := map[string]any{}
		var innerRequired []string
		s.fields(et, inner, &innerRequired)
		for name, p := range inner {
			if _, ok := props[name]; !ok {
				props[name] = p
				if slices.Contains(innerRequired, name) {
					*required = append(*required, name)
				}
			}
		}
	}
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

func nilable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// nullable lets a schema also be null (a Go nil).
func nullable(in Schema) Schema {
	if len(in) == 0 {
		return in // anything, null included
	}
	if typ, ok := in["type"].(string); ok {
		out := Schema{}
		for k, v := range in {
			out[k] = v
		}
		out["type"] = []string{typ, "null"}
		return out
	}
	return Schema{"anyOf": []any{in, Schema{"type": "null"}}}
}

// notNull undoes nullable.
func notNull(in Schema) Schema {
	if types, ok := in["type"].([]string); ok && len(types) == 2 && types[1] == "null" {
		out := Schema{}
		for k, v := range in {
			out[k] = v
		}
		out["type"] = types[0]
		return out
	}
	if alts, ok := in["anyOf"].([]any); ok && len(alts) == 2 {
		if n, ok := alts[1].(Schema); ok && n["type"] == "null" {
			return alts[0].(Schema)
		}
	}
	return in
}

func (s *schemas) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}
