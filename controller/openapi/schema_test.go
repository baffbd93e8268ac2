package openapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type outer struct {
	inner
	A       int               `json:"a"` // shadows inner's a, as encoding/json does
	Opt     *time.Time        `json:"opt,omitempty"`
	Null    *inner            `json:"null"`
	List    []string          `json:"list"`
	Tags    map[string]string `json:"tags,omitempty"`
	Skipped string            `json:"-"`
	hidden  string
}

type selfEncoded struct{}

func (selfEncoded) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }

// TestSchemaFollowsEncodingJSON: the derived schema says what encoding/json writes.
func TestSchemaFollowsEncodingJSON(t *testing.T) {
	sc := &schemas{components: map[string]Schema{}, owners: map[string]reflect.Type{}, required: true}
	ref := sc.of(reflect.TypeFor[outer]())
	if sc.err != nil || ref["$ref"] != "#/components/schemas/outer" {
		t.Fatalf("ref %v, err %v", ref, sc.err)
	}
	got, _ := json.Marshal(sc.components["outer"])
	want := `{"additionalProperties":false,"properties":{` +
		`"a":{"format":"int64","type":"integer"},"b":{"format":"int64","type":"integer"},` +
		`"list":{"items":{"type":"string"},"type":["array","null"]},` +
		`"null":{"anyOf":[{"$ref":"#/components/schemas/inner"},{"type":"null"}]},` +
		`"opt":{"format":"date-time","type":"string"},` +
		`"tags":{"additionalProperties":{"type":"string"},"type":"object"}},` +
		`"required":["a","list","null"],"type":"object"}`
	if string(got) != want {
		t.Fatalf("schema of outer:\n got %s\nwant %s", got, want)
	}
	_ = outer{}.hidden
}

// TestSchemaRefusesSelfEncoding: a type that encodes itself needs a schema given to it.
func TestSchemaRefusesSelfEncoding(t *testing.T) {
	sc := &schemas{components: map[string]Schema{}, owners: map[string]reflect.Type{}}
	sc.of(reflect.TypeFor[struct {
		X selfEncoded `json:"x"`
	}]())
	if sc.err == nil || !strings.Contains(sc.err.Error(), "override") {
		t.Fatalf("err %v, want a request for an override", sc.err)
	}
	sc = &schemas{components: map[string]Schema{}, owners: map[string]reflect.Type{},
		overrides: map[reflect.Type]Schema{reflect.TypeFor[selfEncoded](): {"type": "string"}}}
	if s := sc.of(reflect.TypeFor[selfEncoded]()); sc.err != nil || s["type"] != "string" {
		t.Fatalf("override not used: %v %v", s, sc.err)
	}
}
