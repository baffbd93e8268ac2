package integration

import (
	"encoding/json"
	"github.com/tetherhq/tether/integration/clusterharness"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// cliAs runs the CLI against c with token in TETHER_TOKEN instead of the operator token.
func (c *controllerProc) cliAs(t *testing.T, token string, args ...string) result {
	t.Helper()
	cmd := c.cliCmd(args...)
	cmd.Env = append(cmd.Env, "TETHER_TOKEN="+token)
	return clusterharness.Run(t, cmd)
}

// An API token made with the CLI and limited to one workspace sees and runs commands in that
// one alone (the other answers exactly as a workspace that does not exist), may not manage
// tokens, and is refused once revoked.
func TestAPITokenLimitedToOneWorkspace(t *testing.T) {
	c := startController(t, serveOpts{})
	one := c.createWorkspace(t, "--name", "one")
	two := c.createWorkspace(t, "--name", "two")

	made := c.cli(t, nil, "token", "create", "agent", "--workspace", "one", "--ttl", "1h")
	secret := strings.TrimSpace(made.Stdout)
	if made.Code != 0 || !strings.HasPrefix(secret, "tether_api_") || strings.Count(made.Stdout, "\n") != 1 ||
		!strings.Contains(made.Stderr, "not shown again") || !strings.Contains(made.Stderr, one.ID) {
		t.Fatalf("token create: %+v", made)
	}

	r := c.cliAs(t, secret, "workspace", "ls", "--json")
	var list []api.Workspace
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil || len(list) != 1 || list[0].ID != one.ID {
		t.Fatalf("workspace ls with the limited token: %+v", r)
	}
	if r := c.cliAs(t, secret, "exec", "one", "--", "echo", "hi"); r.Code != 0 || r.Stdout != "hi\n" {
		t.Fatalf("exec in its workspace: %+v", r)
	}
	for name, args := range map[string]func(id string) []string{
		"workspace show":  func(id string) []string { return []string{"workspace", "show", id} },
		"exec":            func(id string) []string { return []string{"exec", id, "--", "true"} },
		"files ls":        func(id string) []string { return []string{"files", "ls", id} },
		"snapshot create": func(id string) []string { return []string{"snapshot", "create", id} },
	} {
		const missingID = "ws_00000000deadbeef"
		other, missing := c.cliAs(t, secret, args(two.ID)...), c.cliAs(t, secret, args(missingID)...)
		expectCLIError(t, other, protocol.CodeNotFound, name+" of the other workspace")
		if strings.ReplaceAll(other.Stderr, two.ID, "ID") != strings.ReplaceAll(missing.Stderr, missingID, "ID") {
			t.Fatalf("%s: the other workspace answers %q, a missing one %q", name, other.Stderr, missing.Stderr)
		}
	}
	expectCLIError(t, c.cliAs(t, secret, "token", "ls"), protocol.CodeUnauthorized, "token ls with a limited token")
	expectCLIError(t, c.cliAs(t, secret, "workspace", "create", "--name", "three"), protocol.CodeUnauthorized, "workspace create with a limited token")

	var toks []api.Token
	if err := json.Unmarshal([]byte(c.mustCLI(t, "token", "ls", "--json")), &toks); err != nil || len(toks) != 1 ||
		toks[0].Name != "agent" || toks[0].Token != "" || toks[0].Revoked || len(toks[0].Workspaces) != 1 {
		t.Fatalf("token ls: %+v, %v", toks, err)
	}
	if out := c.mustCLI(t, "token", "revoke", "agent"); out != "agent revoked\n" {
		t.Fatalf("token revoke printed %q", out)
	}
	r = c.cliAs(t, secret, "workspace", "ls")
	expectCLIError(t, r, protocol.CodeUnauthorized, "workspace ls with the revoked token")
	if !strings.Contains(r.Stderr, "revoked") {
		t.Fatalf("revoked token: %+v", r)
	}
	// The workspaces are as they were.
	if ws := c.showWorkspace(t, "two"); ws.State != api.StateReady {
		t.Fatalf("the other workspace after the limited token's calls: %+v", ws)
	}
}
