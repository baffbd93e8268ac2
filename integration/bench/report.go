package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// Units of a result.
const (
	unitBytes = "bytes"
	unitMS    = "ms"
	unitMiBps = "MiB/s"
)

// ratioNote says how to read the ratio column.
const ratioNote = "ratio = tether / reference: below 1 is better for times, sizes and memory; above 1 is better for throughput (MiB/s, req/s)."

// result is one row of the table: a tether figure beside a reference measured in the same run.
type result struct {
	Metric        string   `json:"metric"`
	Unit          string   `json:"unit"`
	Tether        *float64 `json:"tether"`
	TetherTool    string   `json:"tether_tool"`
	Reference     *float64 `json:"reference"`
	ReferenceTool string   `json:"reference_tool"`
	Ratio         *float64 `json:"ratio"`
	Better        string   `json:"better"` // "lower" or "higher"
	N             int      `json:"n,omitempty"`
	RefN          int      `json:"reference_n,omitempty"`
	Note          string   `json:"note,omitempty"`
}

type report struct {
	Environment map[string]string `json:"environment"`
	Results     []result          `json:"results"`
	RatioNote   string            `json:"ratio_note"`
	Notes       []string          `json:"notes,omitempty"`
}

func val(v float64) *float64 { return &v }

func (r *report) add(res result) {
	for _, v := range []**float64{&res.Tether, &res.Reference} {
		if *v != nil && (math.IsNaN(**v) || math.IsInf(**v, 0)) {
			*v = nil
		}
	}
	if res.Tether != nil && res.Reference != nil && *res.Reference != 0 {
		res.Ratio = val(*res.Tether / *res.Reference)
	}
	if res.Better == "" {
		res.Better = "lower"
		if res.Unit == unitMiBps || res.Unit == unitRPS {
			res.Better = "higher"
		}
	}
	r.Results = append(r.Results, res)
}

func (r *report) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	for _, have := range r.Notes {
		if have == n {
			return
		}
	}
	r.Notes = append(r.Notes, n)
}

func formatValue(v *float64, unit string) string {
	if v == nil || math.IsNaN(*v) {
		return "n/a"
	}
	switch unit {
	case unitBytes:
		return fmt.Sprintf("%.2f MiB (%d B)", *v/(1<<20), int64(*v))
	case unitMS:
		return fmt.Sprintf("%.2f ms", *v)
	case unitMiBps:
		return fmt.Sprintf("%.0f MiB/s", *v)
	case unitRPS:
		return fmt.Sprintf("%.0f req/s", *v)
	}
	return fmt.Sprintf("%g %s", *v, unit)
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func (r *report) markdown(w io.Writer) {
	keys := []string{"tether", "go", "kernel", "cpu", "docker"}
	var env []string
	for _, k := range keys {
		if v := r.Environment[k]; v != "" {
			env = append(env, k+" "+v)
		}
	}
	fmt.Fprintf(w, "Environment: %s\n\n", strings.Join(env, "; "))
	fmt.Fprintln(w, "| metric | tether | reference | reference tool | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, res := range r.Results {
		ratio := "n/a"
		if res.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *res.Ratio)
		}
		metric := res.Metric
		if res.TetherTool != "" {
			metric += " — " + res.TetherTool
		}
		ref := res.ReferenceTool
		if res.Note != "" {
			ref += " (" + res.Note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", cell(metric), formatValue(res.Tether, res.Unit),
			formatValue(res.Reference, res.Unit), cell(ref), ratio)
	}
	fmt.Fprintf(w, "\n%s\n", ratioNote)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

func (r *report) json(w io.Writer) error {
	r.RatioNote = ratioNote
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
