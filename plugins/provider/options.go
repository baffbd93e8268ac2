package provider

import (
	"encoding/json"
	"regexp"
	"sort"
)

// Option describes one provider option, for the config schema and for
// checking option maps against it.
type Option struct {
	Name        string
	Description string
	Default     string
	// Pattern, when set, is a regular expression a value must match whole.
	Pattern string
}

// Options is a provider's option set. It keeps Info.ConfigSchema and
// ValidateConfig in step: both come from the same list.
type Options []Option

// Schema renders the options as a JSON Schema object with string
// properties and no others allowed.
func (o Options) Schema() string {
	props := make(map[string]any, len(o))
	for _, opt := range o {
		p := map[string]any{"type": "string"}
		if opt.Description != "" {
			p["description"] = opt.Description
		}
		if opt.Default != "" {
			p["default"] = opt.Default
		}
		if opt.Pattern != "" {
			p["pattern"] = "^(?:" + opt.Pattern + ")$"
		}
		props[opt.Name] = p
	}
	b, _ := json.Marshal(map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	})
	return string(b)
}

// Check refuses unknown options and values that do not match their pattern,
// with CodeInvalidArgument.
func (o Options) Check(values map[string]string) error {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		opt, ok := o.find(k)
		if !ok {
			return Errorf(CodeInvalidArgument, "unknown option %q (known: %s)", k, o.names())
		}
		if opt.Pattern != "" && !regexp.MustCompile("^(?:"+opt.Pattern+")$").MatchString(values[k]) {
			return Errorf(CodeInvalidArgument, "option %s=%q does not match %s", k, values[k], opt.Pattern)
		}
	}
	return nil
}

// Resolve returns the effective options: defaults, then configured values,
// then per-allocation overrides. It does not check them; call Check first.
func (o Options) Resolve(layers ...map[string]string) map[string]string {
	out := make(map[string]string, len(o))
	for _, opt := range o {
		if opt.Default != "" {
			out[opt.Name] = opt.Default
		}
	}
	for _, l := range layers {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

func (o Options) find(name string) (Option, bool) {
	for _, opt := range o {
		if opt.Name == name {
			return opt, true
		}
	}
	return Option{}, false
}

func (o Options) names() string {
	if len(o) == 0 {
		return "none"
	}
	s := ""
	for i, opt := range o {
		if i > 0 {
			s += ", "
		}
		s += opt.Name
	}
	return s
}

// allocationIDPattern keeps allocation ids usable as one path element and
// inside container names: no separators, no dots.
var allocationIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// CheckAllocationID refuses ids a provider must not turn into a name or a
// path, with CodeInvalidArgument.
func CheckAllocationID(id string) error {
	if !allocationIDPattern.MatchString(id) {
		return Errorf(CodeInvalidArgument, "allocation id %q must be 1-128 characters of [A-Za-z0-9_-], starting with a letter or digit", id)
	}
	return nil
}
