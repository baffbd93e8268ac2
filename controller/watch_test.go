package controller

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// watchFrames is a runner's watch stream: frames, then the stream's end.
func watchFrames(t *testing.T, frames ...func(cw *protocol.ChannelWriter)) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	cw := protocol.NewChannelWriter(&b)
	for _, f := range frames {
		f(cw)
	}
	return &b
}

func event(ev protocol.WatchEvent) func(cw *protocol.ChannelWriter) {
	return func(cw *protocol.ChannelWriter) { _ = cw.WriteJSONFrame(protocol.ChanWatchEvent, ev) }
}

func raw(ch protocol.Channel, p string) func(cw *protocol.ChannelWriter) {
	return func(cw *protocol.ChannelWriter) { _ = cw.WriteFrame(ch, []byte(p)) }
}

func relayed(t *testing.T, src *bytes.Buffer, top string, recursive bool) ([]protocol.WatchEvent, error) {
	t.Helper()
	var out bytes.Buffer
	end := relayWatch(src, &out, func() {}, top, recursive)
	var evs []protocol.WatchEvent
	dec := json.NewDecoder(&out)
	for dec.More() {
		var ev protocol.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("relayed a line that does not decode: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs, end
}

func TestRelayWatchPassesCheckedEventsAndEndsOnTheFirstBadOne(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	good := protocol.WatchEvent{Type: protocol.WatchCreate, Path: "src/a.go", Time: now}
	for _, c := range []struct {
		name  string
		bad   func(cw *protocol.ChannelWriter)
		code  protocol.Code
		inMsg string
	}{
		{"escape", event(protocol.WatchEvent{Type: protocol.WatchCreate, Path: "../etc/passwd"}), protocol.CodeCorrupt, "passwd"},
		{"absolute", event(protocol.WatchEvent{Type: protocol.WatchCreate, Path: "/etc/passwd"}), protocol.CodeCorrupt, "passwd"},
		{"beside the watch", event(protocol.WatchEvent{Type: protocol.WatchWrite, Path: "other/x"}), protocol.CodeCorrupt, "other/x"},
		{"unknown type", event(protocol.WatchEvent{Type: "exec", Path: "src/x"}), protocol.CodeCorrupt, "exec"},
		{"an error line smuggled as an event", event(protocol.WatchEvent{Type: protocol.WatchError, Error: protocol.Errorf(protocol.CodeUnauthorized, "x")}), protocol.CodeCorrupt, "error"},
		{"unknown field", raw(protocol.ChanWatchEvent, `{"type":"create","path":"src/x","time":"2025-01-01T00:00:00Z","admin":true}`), protocol.CodeCorrupt, "admin"},
		{"two objects", raw(protocol.ChanWatchEvent, `{"type":"create","path":"src/x"}{"type":"create","path":"src/y"}`), protocol.CodeCorrupt, "after"},
		{"not json", raw(protocol.ChanWatchEvent, "create src/x\n"), protocol.CodeCorrupt, "decode"},
		{"too large", raw(protocol.ChanWatchEvent, `{"type":"overflow","reason":"`+strings.Repeat("x", protocol.MaxWatchEvent)+`"}`), protocol.CodeCorrupt, "bytes"},
		{"other channel", raw(protocol.ChanStdout, "hello"), protocol.CodeCorrupt, "channel"},
		{"cut", func(*protocol.ChannelWriter) {}, protocol.CodeUnavailable, "ended"},
		{"runner's unauthorized", func(cw *protocol.ChannelWriter) {
			_ = cw.WriteJSONFrame(protocol.ChanError, protocol.Errorf(protocol.CodeUnauthorized, "token revoked"))
		}, protocol.CodeFailed, "token revoked"},
		{"directory gone", func(cw *protocol.ChannelWriter) {
			_ = cw.WriteJSONFrame(protocol.ChanError, protocol.Errorf(protocol.CodeNotFound, "gone"))
		}, protocol.CodeNotFound, "gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			frames := []func(cw *protocol.ChannelWriter){event(good), c.bad}
			if c.code != protocol.CodeUnavailable {
				frames = append(frames, event(good)) // never relayed
			}
			src := watchFrames(t, frames...)
			evs, end := relayed(t, src, "src", true)
			if len(evs) != 1 || evs[0] != good {
				t.Fatalf("relayed %+v, want the one good event before the bad one", evs)
			}
			if protocol.CodeOf(end) != c.code || !strings.Contains(end.Error(), c.inMsg) {
				t.Fatalf("end %v, want %s mentioning %q", end, c.code, c.inMsg)
			}
		})
	}
}

func TestRelayWatchHoldsANonRecursiveWatchToItsDirectory(t *testing.T) {
	src := watchFrames(t, event(protocol.WatchEvent{Type: protocol.WatchCreate, Path: "src/a"}),
		event(protocol.WatchEvent{Type: protocol.WatchCreate, Path: "src/a/b"}))
	evs, end := relayed(t, src, "src", false)
	if len(evs) != 1 || protocol.CodeOf(end) != protocol.CodeCorrupt {
		t.Fatalf("relayed %+v, end %v", evs, end)
	}
}
