package provider

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// tailLines is how many of a plugin's last output lines a Client keeps.
const tailLines = 20

// tailWriter keeps the last lines written to it, so a crashed plugin's
// final words can be attached to the operation that failed. Lines in
// hclog's JSON format are shown as "LEVEL message key=value". The first
// line of a Go panic is kept even once the stack has pushed it out.
type tailWriter struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
	crash   string
}

func newTailWriter(max int) *tailWriter {
	return &tailWriter{max: max}
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := strings.IndexByte(string(w.partial), '\n')
		if i < 0 {
			break
		}
		w.add(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	// A line without an end is kept whole up to a bound, then cut.
	if len(w.partial) > 4096 {
		w.add(string(w.partial))
		w.partial = nil
	}
	return len(p), nil
}

func (w *tailWriter) add(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	line = readableLogLine(line)
	if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
		w.crash = line
	}
	w.lines = append(w.lines, line)
	if len(w.lines) > w.max {
		w.lines = w.lines[len(w.lines)-w.max:]
	}
}

// Lines returns the kept lines, oldest first, with an unfinished last line.
func (w *tailWriter) Lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.lines)+2)
	if w.crash != "" && (len(w.lines) == 0 || !containsString(w.lines, w.crash)) {
		out = append(out, w.crash, "...")
	}
	out = append(out, w.lines...)
	if len(w.partial) > 0 {
		out = append(out, string(w.partial))
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// readableLogLine renders one of hclog's JSON lines as text; anything else
// is returned unchanged.
func readableLogLine(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return line
	}
	var b strings.Builder
	if lvl, ok := m["@level"].(string); ok {
		b.WriteString(strings.ToUpper(lvl))
		b.WriteByte(' ')
	}
	b.WriteString(msg)
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, m[k])
	}
	return b.String()
}
