package snapshot

import (
	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// CodeReservedName: the tree holds a name the archive format keeps for itself (ManifestName at
// the root). The capture fails, naming it, rather than leave the file out.
const CodeReservedName = "reserved_name"

// inFlight is the reason a Skipped entry gives for a runner's own temporary file or staging
// directory.
const inFlight = "in flight: the runner's own unfinished write or restore"

// reservedEntry decides what becomes of a listed entry whose name looks like one Tether uses.
// Only what the root's Holds says the runner itself made and still holds is left out (and
// listed as skipped): a write or restore in flight is not the agent's work. Every other such
// name is archived like any file, except ManifestName at the root, which would be taken for
// the archive's manifest: that fails the capture with CodeReservedName.
func (c *capturer) reservedEntry(d *fsguard.Root, rel, name, p string, st *unix.Stat_t) (skip bool, err error) {
	if !reserved(name) {
		return false, nil
	}
	if d.Held(st) {
		c.skip(p, st.Mode, inFlight)
		return true, nil
	}
	if rel == "." && name == ManifestName {
		return false, newError(CodeReservedName, p, "the name "+ManifestName+" at the workspace root is the snapshot manifest's; rename the file to save the workspace", nil)
	}
	return false, nil
}
