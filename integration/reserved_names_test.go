package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// Files an agent names like Tether's own temporary files and manifest are its work: they count
// as unsaved changes, survive close and reopen, and the one name that cannot be archived as it
// is (the manifest's, at the root) makes close refuse, naming it, instead of dropping it.
func TestReservedNamesAreNeverSkippedSilently(t *testing.T) {
	c := startController(t, serveOpts{})
	c.createWorkspace(t, "--name", "names")
	p := &promises{t: t}
	names := []string{".tether-tmp-notes", ".tether-stage-draft/plan.md", "sub/.tether-manifest.json", "sub/.tether-tmp-x/y"}
	closeCheck := func() api.CloseCheck {
		var chk api.CloseCheck
		if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "names", "--check", "--json")), &chk); err != nil {
			t.Fatal(err)
		}
		return chk
	}

	// Saved once, clean: then only the reserved-looking files are new.
	c.mustCLI(t, "snapshot", "create", "names")
	p.check(!closeCheck().PendingChanges, "a just-saved workspace has pending changes")
	script := "set -e; for f in \"$@\"; do mkdir -p \"$(dirname \"$f\")\"; echo \"agent wrote $f\" > \"$f\"; done"
	// A file at the root changes no archived directory: only its own entry says it is new.
	c.mustCLI(t, "exec", "names", "--", "sh", "-c", script, "sh", names[0])
	chk := closeCheck()
	p.check(chk.PendingChanges && chk.Ready, "close --check with only %s new: %+v", names[0], chk)
	c.mustCLI(t, append([]string{"exec", "names", "--", "sh", "-c", script, "sh"}, names[1:]...)...)

	c.mustCLI(t, "workspace", "close", "names")
	c.mustCLI(t, "workspace", "reopen", "names")
	for _, n := range names {
		got := strings.TrimSpace(c.cli(t, nil, "exec", "names", "--", "cat", n).Stdout)
		p.check(got == "agent wrote "+n, "%s after close and reopen: %q", n, got)
	}

	// The manifest's own name at the root.
	c.mustCLI(t, "exec", "names", "--", "sh", "-c", "echo mine > .tether-manifest.json")
	chk = closeCheck()
	p.check(chk.PendingChanges && !chk.Ready && strings.Contains(strings.Join(chk.Reasons, "\n"), ".tether-manifest.json"),
		"close --check with .tether-manifest.json at the root: %+v", chk)
	r := c.cli(t, nil, "workspace", "close", "names")
	p.check(r.Code == 30 && strings.Contains(r.Stderr, "reserved_name") && strings.Contains(r.Stderr, ".tether-manifest.json"),
		"close with .tether-manifest.json at the root: exit %d, %s", r.Code, r.Stderr)
	got := c.showWorkspace(t, "names")
	p.check(got.State == api.StateReady && got.Connected, "a refused close changed the workspace: %+v", got)
	c.mustCLI(t, "exec", "names", "--", "mv", ".tether-manifest.json", "manifest-renamed.json")
	r = c.cli(t, nil, "workspace", "close", "names")
	p.check(r.Code == 0, "close once renamed: exit %d, %s", r.Code, r.Stderr)
	t.Logf("reserved names: %d promises tried, %d held (%d agent files named like Tether's kept through close and reopen)", p.tried, p.held, len(names))
}
