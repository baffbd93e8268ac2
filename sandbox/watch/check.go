package watch

import (
	"path"
	"strings"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

// Check holds an event from an untrusted runner to what a watch of top (recursive or not) can
// report: a known type and shape (protocol.WatchEvent.CheckWatchShape), canonical relative
// paths, top or beneath it (directly beneath it when not recursive), no name of Tether's own
// temporaries. Every refusal is CodeCorrupt.
func Check(ev protocol.WatchEvent, top string, recursive bool) error {
	if err := ev.CheckWatchShape(); err != nil {
		return err
	}
	for _, p := range []string{ev.Path, ev.OldPath} {
		if p == "" {
			continue
		}
		if err := checkPath(p, top, recursive); err != nil {
			return protocol.Errorf(protocol.CodeCorrupt, "watch event %s of %q: %v", ev.Type, p, err)
		}
	}
	return nil
}

func checkPath(p, top string, recursive bool) error {
	clean, err := fsguard.Clean(p)
	if err != nil {
		return err
	}
	if clean != p {
		return protocol.Errorf(protocol.CodeCorrupt, "not a canonical path")
	}
	for _, elem := range strings.Split(p, "/") {
		if Reserved(elem) {
			return protocol.Errorf(protocol.CodeCorrupt, "a name of tether's temporary files")
		}
	}
	if !under(p, top) {
		return protocol.Errorf(protocol.CodeCorrupt, "not %s or beneath it", top)
	}
	if !recursive && p != top && path.Dir(p) != top {
		return protocol.Errorf(protocol.CodeCorrupt, "not directly in %s (the watch is not recursive)", top)
	}
	return nil
}
