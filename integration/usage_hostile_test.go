package integration

import (
	"net/http"
	"testing"
	"time"
)

// TestHostileRunnerUsage: a runner reporting usage no sandbox could have (wrong types, numbers
// past every bound, negative ones) gets each report refused invalid_argument and counted, and
// none of it shows; its honest report does, exactly; a flood of reports is refused past one a
// second; and seven refusals (under the strike limit) leave the runner connected.
func TestHostileRunnerUsage(t *testing.T) {
	h := startHostileRunners(t)
	ws := h.workspace(t, "usage-garbage")
	var report map[string]any
	eventually(t, time.Minute, "the hostile runner's usage report", func() bool {
		for _, r := range h.reports(t) {
			if r["event"] == "usage" {
				report = r
				return true
			}
		}
		return false
	})
	if report["garbage_refused"] != report["garbage"] {
		t.Errorf("garbage refused: %v of %v", report["garbage_refused"], report["garbage"])
	}
	accepted, _ := report["accepted"].(float64)
	soon, _ := report["refused_too_soon"].(float64)
	if accepted < 1 || accepted+soon != 6 {
		t.Errorf("honest reports: %v accepted, %v refused as too soon; want at least 1 and 6 answered", accepted, soon)
	}
	w := h.c.showWorkspace(t, ws.ID)
	if !w.Connected {
		t.Error("the runner was cut off after fewer refusals than the strike limit")
	}
	if u := w.Usage; u == nil || u.CPUPercent != 42.5 || u.MemoryBytes != 12345 || u.DiskBytes != 4096 {
		t.Errorf("usage shown %+v, want the honest report's", u)
	}
	code, fams := scrapeMetrics(t, h.c.Addr+"/metrics", h.c.Token)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	garbage, _ := report["garbage"].(float64)
	if v, _ := sample(fams, "tether_usage_reports_refused_total", nil); v != garbage+soon {
		t.Errorf("tether_usage_reports_refused_total = %v, want %v", v, garbage+soon)
	}
	if v, ok := sample(fams, "tether_workspace_cpu_percent", map[string]string{"workspace": ws.ID}); !ok || v != 42.5 {
		t.Errorf("tether_workspace_cpu_percent = %v (%v), want 42.5", v, ok)
	}
}
