package providers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestPluginLogsLandInSlog: what go-plugin logs through the provider's hclog logger comes out of
// the controller's slog handler, one record per line, with the provider's name, its level and
// fields; a line past the bound is cut, not held whole.
func TestPluginLogsLandInSlog(t *testing.T) {
	var out bytes.Buffer
	set := New(t.TempDir(), t.TempDir(), nil, slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	log := set.pluginLogger("local")
	log.Info("plugin started", "pid", 42) // chatter: below warn unless the controller logs debug
	log.Named("tether-provider-local").Error("plugin process exited", "error", "boom")
	log.Warn(strings.Repeat("x", 2*maxPluginLine))

	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2 (info dropped):\n%s", len(recs), out.String())
	}
	first := recs[0]
	if first["level"] != "ERROR" || first["msg"] != "plugin process exited" || first["provider"] != "local" ||
		first["error"] != "boom" || first["module"] != "provider.local.tether-provider-local" {
		t.Errorf("record %v", first)
	}
	if msg, _ := recs[1]["msg"].(string); recs[1]["level"] != "WARN" || len(msg) > maxPluginLine {
		t.Errorf("an oversized line came through as %d bytes at %v", len(msg), recs[1]["level"])
	}

	// At debug, the chatter shows.
	out.Reset()
	set = New(t.TempDir(), t.TempDir(), nil, slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	set.pluginLogger("docker").Info("plugin started")
	if !strings.Contains(out.String(), `"msg":"plugin started"`) || !strings.Contains(out.String(), `"provider":"docker"`) {
		t.Errorf("debug controller log: %s", out.String())
	}
	var _ hclog.Logger = log
}
