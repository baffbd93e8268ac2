package providers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// pluginLogger is the hclog logger go-plugin is given for the named provider: its lines (the
// plugin's own logs, which go-plugin re-logs, its stray stdio and go-plugin's chatter) land in
// the controller's slog stream with provider=NAME, in the controller's format and filtered by
// its level. Plugin chatter at info (started, exited) is debug detail: unless the controller
// logs at debug, or TETHER_PLUGIN_LOG names a level, only warnings and errors pass.
func (p *Set) pluginLogger(name string) hclog.Logger {
	level := hclog.Warn
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	if v := os.Getenv("TETHER_PLUGIN_LOG"); v != "" {
		level = cmp.Or(hclog.LevelFromString(v), level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "provider." + name, Level: level, JSONFormat: true,
		Output: &slogHCLog{log: p.log.With("provider", name)}})
}

// maxPluginLine bounds one log line a plugin makes the controller hold; the rest of a longer one
// is dropped.
const maxPluginLine = 64 << 10

// slogHCLog takes hclog's JSON lines and logs each through slog: its level, message and
// fields, plus the hclog module as "module".
type slogHCLog struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte
}

func (w *slogHCLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxPluginLine - len(w.partial); room > 0 {
				w.partial = append(w.partial, p[:min(len(p), room)]...)
			}
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			line = append(w.partial, line[:min(len(line), max(0, maxPluginLine-len(w.partial)))]...)
			w.partial = nil
		}
		w.emit(line[:min(len(line), maxPluginLine)])
		p = p[i+1:]
	}
	return n, nil
}

// emit logs one line hclog wrote: JSON as hclog makes it, or (should anything else come) the
// line as the message at warn.
func (w *slogHCLog) emit(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var entry map[string]any
	if err := json.Unmarshal(line, &entry); err != nil {
		w.log.Warn(string(line))
		return
	}
	level := slogLevel(fmt.Sprint(entry["@level"]))
	msg, _ := entry["@message"].(string)
	attrs := make([]any, 0, 2*len(entry))
	if m, ok := entry["@module"].(string); ok && m != "" {
		attrs = append(attrs, "module", m)
	}
	keys := make([]string, 0, len(entry))
	for k := range entry {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		attrs = append(attrs, k, entry[k])
	}
	w.log.Log(context.Background(), level, msg, attrs...)
}

func slogLevel(hc string) slog.Level {
	switch hc {
	case "trace":
		return slog.LevelDebug - 4
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn":
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
