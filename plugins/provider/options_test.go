package provider

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOptionsSchemaCheckResolve(t *testing.T) {
	opts := Options{
		{Name: "image", Default: "img:dev", Description: "the image"},
		{Name: "pids", Pattern: `[0-9]+`},
	}
	var schema struct {
		Type       string
		Properties map[string]map[string]string
		Additional bool `json:"additionalProperties"`
	}
	if err := json.Unmarshal([]byte(opts.Schema()), &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || schema.Additional || schema.Properties["image"]["default"] != "img:dev" ||
		schema.Properties["pids"]["pattern"] != "^(?:[0-9]+)$" {
		t.Fatalf("schema %s", opts.Schema())
	}
	if err := opts.Check(map[string]string{"image": "x", "pids": "12"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"nope": "1"}, {"pids": "12x"}, {"pids": ""}} {
		if ErrorCode(opts.Check(bad)) != CodeInvalidArgument {
			t.Errorf("Check(%v) accepted", bad)
		}
	}
	got := opts.Resolve(map[string]string{"pids": "1"}, map[string]string{"pids": "2"})
	if got["image"] != "img:dev" || got["pids"] != "2" {
		t.Fatalf("Resolve = %v", got)
	}
}

func TestCheckAllocationID(t *testing.T) {
	for _, ok := range []string{"al_0123abcd", "a", "A-b_c", strings.Repeat("x", 128)} {
		if err := CheckAllocationID(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "-x", "_x", "a b", "a.b", strings.Repeat("x", 129), "a\x00"} {
		if ErrorCode(CheckAllocationID(bad)) != CodeInvalidArgument {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestTailWriterKeepsLastLinesAndPanic(t *testing.T) {
	w := newTailWriter(3)
	_, _ = w.Write([]byte(`{"@level":"warn","@message":"disk low","free":"1G"}` + "\n"))
	_, _ = w.Write([]byte("panic: boom\n\ngoroutine 1 [running]:\nmain.f()\n\t/x.go:1\nmain.main()\npart"))
	got := w.Lines()
	want := []string{"panic: boom", "...", "main.f()", "\t/x.go:1", "main.main()", "part"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Lines = %q, want %q", got, want)
	}
	w = newTailWriter(5)
	_, _ = w.Write([]byte(`{"@level":"warn","@message":"disk low","free":"1G"}` + "\n"))
	if got := w.Lines(); len(got) != 1 || got[0] != "WARN disk low free=1G" {
		t.Fatalf("hclog line rendered as %q", got)
	}
}
