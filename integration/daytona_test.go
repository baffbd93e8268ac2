package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/plugins/daytona/fake"
)

// startDaytonaFakeController starts the in-repo FAKE of Daytona's API and a controller whose
// Daytona provider talks to it.
func startDaytonaFakeController(t *testing.T) (*controllerProc, *fake.Server) {
	t.Helper()
	const key = "fake-daytona-key"
	api0 := fake.New(t, t.TempDir(), key)
	t.Setenv("TETHER_TEST_DAYTONA_KEY", key)
	c := startController(t, serveOpts{extraArgs: []string{
		"--provider-config", "daytona.api_url=" + api0.URL(),
		"--provider-config", "daytona.api_key_env=TETHER_TEST_DAYTONA_KEY",
	}})
	return c, api0
}

// The whole journey on the Daytona provider, against the in-repo FAKE of Daytona's API (real
// runner processes behind it): create, exec, files, snapshot, restore, remove.
func TestDaytonaProviderAgainstTheFake(t *testing.T) {
	c, api0 := startDaytonaFakeController(t)
	var ws api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "create", "--provider", "daytona", "--name", "day", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	if ws.State != api.StateReady || ws.Provider != "daytona" {
		t.Fatalf("daytona workspace: %+v", ws)
	}
	if r := c.cli(t, strings.NewReader("hello daytona\n"), "files", "put", "day", "-", "greeting.txt"); r.Code != 0 {
		t.Fatalf("put: %+v", r)
	}
	if r := c.cli(t, nil, "exec", "day", "--", "cat", "greeting.txt"); r.Code != 0 || r.Stdout != "hello daytona\n" {
		t.Fatalf("exec: %+v", r)
	}
	// The way out for a runner that cannot connect: copy through the provider's own file API.
	dest := t.TempDir()
	var exp api.ExportResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "export", "day", "--to", dest, "--json")), &exp); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "greeting.txt")); err != nil || string(b) != "hello daytona\n" || exp.Files == 0 {
		t.Fatalf("export: %+v, %q, %v", exp, b, err)
	}
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "day", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "workspace", "rm", "day")
	if n := len(api0.Sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes left at the (fake) provider after rm", n)
	}
	c.mustCLI(t, "snapshot", "restore", snap.ID, "--provider", "local", "--name", "back")
	if r := c.cli(t, nil, "exec", "back", "--", "cat", "greeting.txt"); r.Code != 0 || r.Stdout != "hello daytona\n" {
		t.Fatalf("restored from a Daytona snapshot: %+v", r)
	}
	// Providers without a file API of their own say so.
	if r := c.cli(t, nil, "workspace", "export", "back", "--to", t.TempDir()); r.Code != 14 || !strings.HasPrefix(r.Stderr, "error: unsupported: ") {
		t.Fatalf("export on the local provider: %+v", r)
	}
}
