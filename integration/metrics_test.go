package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics GETs url (a /metrics) with token ("" for none) and parses it with Prometheus'
// text parser; a status other than 200 is returned with no families.
func scrapeMetrics(t *testing.T, url, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return resp.StatusCode, fams
}

// sample finds the series of family name whose labels include want: its value (a histogram's
// sample count) and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

var metricsListenLine = regexp.MustCompile(`msg="metrics served without authentication" addr=(\S+)`)

// TestMetricsAfterWorkload runs a workload on a real controller with the local provider (create,
// exec, files put and get, a snapshot, an API error) and scrapes /metrics from both listeners,
// parsed as Prometheus parses it: the counters moved, the workspace's usage gauges appear (and
// match what the workspace JSON and `workspace show` report), and go once it closes.
func TestMetricsAfterWorkload(t *testing.T) {
	c := startController(t, serveOpts{extraArgs: []string{"--metrics-listen", "127.0.0.1:0"}})
	var scrapeAddr string
	eventually(t, 30*time.Second, "the metrics listener's address in the log", func() bool {
		m := metricsListenLine.FindStringSubmatch(c.log.String())
		if m != nil {
			scrapeAddr = m[1]
		}
		return m != nil
	})
	open := "http://" + scrapeAddr + "/metrics"

	// The API listener's /metrics asks for a token; the scrape listener serves nothing else.
	if code, _ := scrapeMetrics(t, c.Addr+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	if resp, err := http.Get("http://" + scrapeAddr + "/v1/workspaces"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the API on the scrape listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	ws := c.createWorkspace(t)
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo hello")
	payload := bytes.Repeat([]byte("tether metrics "), 64<<10) // ~960 KiB
	src := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(src, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "files", "put", ws.ID, src, "payload")
	if got := c.mustCLI(t, "files", "get", ws.ID, "payload"); got != string(payload) {
		t.Fatalf("files get returned %d bytes, want %d", len(got), len(payload))
	}
	c.mustCLI(t, "snapshot", "create", ws.ID)
	if r := c.cli(t, nil, "workspace", "show", "ws_0000000000000000"); r.Code == 0 {
		t.Fatal("showing a missing workspace succeeded")
	}

	// The runner's first usage report comes about 2 s after it starts.
	var raw map[string]json.RawMessage
	eventually(t, time.Minute, "the workspace's usage in its JSON", func() bool {
		raw = nil
		return json.Unmarshal([]byte(c.mustCLI(t, "workspace", "show", ws.ID, "--json")), &raw) == nil && raw["usage"] != nil
	})
	var usage map[string]any
	if err := json.Unmarshal(raw["usage"], &usage); err != nil {
		t.Fatal(err)
	}
	if len(usage) != 4 {
		t.Errorf("usage has keys %v, want exactly cpu_percent, memory_bytes, disk_bytes, sampled_at", usage)
	}
	if _, err := time.Parse(time.RFC3339, usage["sampled_at"].(string)); err != nil {
		t.Errorf("sampled_at: %v", err)
	}
	for _, k := range []string{"cpu_percent", "memory_bytes", "disk_bytes"} {
		if _, ok := usage[k].(float64); !ok {
			t.Errorf("usage[%s] = %#v, want a number", k, usage[k])
		}
	}
	// The workspace holds the payload: its disk usage counts it.
	if usage["disk_bytes"].(float64) < float64(len(payload)) || usage["memory_bytes"].(float64) <= 0 {
		t.Errorf("usage %v: want disk ≥ %d bytes and some memory", usage, len(payload))
	}
	show := c.mustCLI(t, "workspace", "show", ws.ID)
	for _, row := range []string{"CPU", "Memory", "Disk", "Sampled"} {
		if !regexp.MustCompile(`(?m)^` + row + `:?\s`).MatchString(show) {
			t.Errorf("workspace show has no %s row:\n%s", row, show)
		}
	}

	code, fams := scrapeMetrics(t, c.Addr+"/metrics", c.Token)
	if code != http.StatusOK {
		t.Fatalf("/metrics with the operator token: %d", code)
	}
	_, open1 := scrapeMetrics(t, open, "")
	if open1["tether_api_requests_total"] == nil {
		t.Fatal("the scrape listener serves no tether metrics")
	}
	atLeast := func(name string, labels map[string]string, min float64) {
		t.Helper()
		if v, ok := sample(fams, name, labels); !ok || v < min {
			t.Errorf("%s%v = %v (present %v), want at least %v", name, labels, v, ok, min)
		}
	}
	atLeast("tether_runners_connected", nil, 1)
	atLeast("tether_runs_total", map[string]string{"state": "running"}, 1)
	atLeast("tether_runs_total", map[string]string{"state": "exited"}, 1)
	atLeast("tether_api_requests_total", map[string]string{"route": "POST /v1/workspaces", "status": "201"}, 1)
	atLeast("tether_api_requests_total", map[string]string{"route": "PUT /v1/workspaces/{id}/files/{path...}"}, 1)
	atLeast("tether_api_errors_total", map[string]string{"route": "GET /v1/workspaces/{id}", "code": "not_found"}, 1)
	atLeast("tether_api_request_duration_seconds", map[string]string{"route": "GET /v1/workspaces/{id}/exec"}, 1)
	atLeast("tether_bytes_total", map[string]string{"kind": "file_put"}, float64(len(payload)))
	atLeast("tether_bytes_total", map[string]string{"kind": "file_get"}, float64(len(payload)))
	atLeast("tether_bytes_total", map[string]string{"kind": "snapshot_capture"}, 1)
	atLeast("tether_snapshot_capture_duration_seconds", map[string]string{"result": "ok"}, 1)
	atLeast("tether_workspace_disk_bytes", map[string]string{"workspace": ws.ID}, float64(len(payload)))
	atLeast("tether_workspace_memory_bytes", map[string]string{"workspace": ws.ID}, 1)
	if _, ok := sample(fams, "tether_workspace_cpu_percent", map[string]string{"workspace": ws.ID}); !ok {
		t.Error("no tether_workspace_cpu_percent series for the workspace")
	}
	// No label carries a raw path or id, but the usage gauges' workspace.
	for name, f := range fams {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() != "workspace" && strings.Contains(l.GetValue(), ws.ID) {
					t.Errorf("%s has label %s=%q: an id in a label", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	// Closed, the workspace's runner is gone and so are its series.
	c.mustCLI(t, "workspace", "close", ws.ID)
	eventually(t, time.Minute, "the closed workspace's usage series to go", func() bool {
		_, fams := scrapeMetrics(t, open, "")
		_, ok := sample(fams, "tether_workspace_memory_bytes", map[string]string{"workspace": ws.ID})
		return !ok
	})
	if w := c.showWorkspace(t, ws.ID); w.Usage != nil {
		t.Errorf("a closed workspace shows usage %+v", w.Usage)
	}
}
