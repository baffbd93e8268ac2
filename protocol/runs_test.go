package protocol

import (
	"encoding/json"
	"testing"
)

func TestLogCursorAcceptsOnlyOutputThatContinues(t *testing.T) {
	raw := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c := LogCursor{Offsets: [2]int64{10, 0}}
	c.Data(ChanStdout, 5)
	c.Data(ChanStderr, 3)
	if c.Offsets != [2]int64{15, 3} {
		t.Fatalf("after data: %v; want [15 3]", c.Offsets)
	}
	if _, err := c.Gap(raw(LogGap{Stream: StreamStdout, From: 15, To: 40})); err != nil {
		t.Fatalf("a gap at the stream's offset: %v", err)
	}
	if c.Offsets != [2]int64{40, 3} {
		t.Fatalf("after the gap: %v; want [40 3]", c.Offsets)
	}
	for name, g := range map[string]LogGap{
		"backwards":          {Stream: StreamStdout, From: 40, To: 20},
		"empty":              {Stream: StreamStdout, From: 40, To: 40},
		"not at the offset":  {Stream: StreamStdout, From: 39, To: 50},
		"skipping ahead":     {Stream: StreamStderr, From: 4, To: 9},
		"of no known stream": {Stream: "stdin", From: 0, To: 9},
	} {
		before := c.Offsets
		if _, err := c.Gap(raw(g)); CodeOf(err) != CodeCorrupt {
			t.Errorf("gap %s %+v: %v; want corrupt", name, g, err)
		}
		if c.Offsets != before {
			t.Errorf("gap %s moved the offsets to %v", name, c.Offsets)
		}
	}
	if _, err := c.Gap([]byte("{")); CodeOf(err) != CodeCorrupt {
		t.Errorf("a gap frame that is not JSON: %v; want corrupt", err)
	}
	exit := ExecExit{ExitCode: 3}
	for name, e := range map[string]LogEnd{
		"stdout elsewhere":      {StdoutOffset: 41, StderrOffset: 3},
		"stderr elsewhere":      {StdoutOffset: 40, StderrOffset: 0},
		"finished without exit": {StdoutOffset: 40, StderrOffset: 3, Finished: true},
		"an exit while running": {StdoutOffset: 40, StderrOffset: 3, Exit: &exit},
	} {
		if _, err := c.End(raw(e)); CodeOf(err) != CodeCorrupt {
			t.Errorf("end %s %+v: %v; want corrupt", name, e, err)
		}
	}
	if end, err := c.End(raw(LogEnd{StdoutOffset: 40, StderrOffset: 3, Finished: true, Exit: &exit})); err != nil || end.Exit.ExitCode != 3 {
		t.Fatalf("an end at the offsets reached: %+v, %v", end, err)
	}
}
