package watch

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestCheckRefusesWhatAWatchCannotReport(t *testing.T) {
	ok := []struct {
		ev        protocol.WatchEvent
		top       string
		recursive bool
	}{
		{ev(protocol.WatchCreate, "src/a.go", false), "src", false},
		{ev(protocol.WatchRemove, "src", true), "src", false},
		{ev(protocol.WatchWrite, "a/b/c", false), ".", true},
		{ev(protocol.WatchChmod, "a", false), ".", false},
		{protocol.WatchEvent{Type: protocol.WatchRename, Path: "src/b", OldPath: "src/a"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchOverflow, Reason: "queue full"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchOverflow, Path: "src/x/y", Reason: "limit"}, "src", true},
	}
	for _, c := range ok {
		if err := Check(c.ev, c.top, c.recursive); err != nil {
			t.Errorf("%+v under %s: %v", c.ev, c.top, err)
		}
	}
	bad := []struct {
		ev        protocol.WatchEvent
		top       string
		recursive bool
	}{
		{ev("exec", "src/a", false), "src", true},
		{ev("", "src/a", false), "src", true},
		{ev(protocol.WatchCreate, "", false), ".", true},
		{ev(protocol.WatchCreate, "/etc/passwd", false), ".", true},
		{ev(protocol.WatchCreate, "../x", false), ".", true},
		{ev(protocol.WatchCreate, "src/../../x", false), ".", true},
		{ev(protocol.WatchCreate, "src//a", false), ".", true},
		{ev(protocol.WatchCreate, "./src", false), ".", true},
		{ev(protocol.WatchCreate, "src/a\x00b", false), ".", true},
		{ev(protocol.WatchCreate, "other/a", false), "src", true},
		{ev(protocol.WatchCreate, "srcx/a", false), "src", true},
		{ev(protocol.WatchCreate, "src/a/b", false), "src", false},
		{ev(protocol.WatchCreate, "src/.tether-tmp-1", false), "src", true},
		{ev(protocol.WatchCreate, "src/.tether-stage-1/a", false), "src", true},
		{ev(protocol.WatchCreate, strings.Repeat("a/", 3000)+"a", false), ".", true},
		{protocol.WatchEvent{Type: protocol.WatchRename, Path: "src/b"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchRename, Path: "src/b", OldPath: "/etc/shadow"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchCreate, Path: "src/b", OldPath: "src/a"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchCreate, Path: "src/b", Reason: "x"}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchOverflow, Reason: strings.Repeat("x", 300)}, "src", false},
		{protocol.WatchEvent{Type: protocol.WatchOverflow, Path: "etc", Reason: "x"}, "src", false},
	}
	for _, c := range bad {
		err := Check(c.ev, c.top, c.recursive)
		if protocol.CodeOf(err) != protocol.CodeCorrupt {
			t.Errorf("%+v under %s (recursive %v): %v, want corrupt", c.ev, c.top, c.recursive, err)
		}
	}
}
