package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// TestServiceReadyMeansItsPortAnswers: without --ready, a service is ready once its own port
// accepts a connection. python3 -m http.server ignores $PORT: it is never reported ready, and
// the start fails with timeout naming the port; the same server told its port is ready, and
// its endpoint is verified on the port the controller allotted.
func TestServiceReadyMeansItsPortAnswers(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)

	// Port 0: the kernel picks one, as an app with its own default port would, never $PORT.
	r := c.cli(t, nil, "service", "start", ws.ID, "ignores-port", "--port", "auto", "--ready-timeout", "2s",
		"--", "python3", "-m", "http.server", "--bind", "127.0.0.1", "0")
	if r.Code != protocol.CodeTimeout.ExitCode() || !strings.Contains(r.Stderr, "error: timeout: ") ||
		!strings.Contains(r.Stderr, "nothing accepted a connection on its port 127.0.0.1:") {
		t.Fatalf("a service ignoring its port: exit %d, stderr %q; want timeout naming its port", r.Code, r.Stderr)
	}
	var list []api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "ls", ws.ID, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State != protocol.ServiceFailed || list[0].ReadyAt != nil {
		t.Fatalf("after the refused start: %+v", list)
	}
	if r := c.cli(t, nil, "service", "endpoint", ws.ID, "ignores-port"); r.Code == 0 {
		t.Fatalf("an endpoint for a service that never got ready: %q", r.Stdout)
	}

	var v api.Service
	out := c.mustCLI(t, "service", "start", ws.ID, "web", "--port", "auto", "--json",
		"--", "sh", "-c", "exec python3 -m http.server --bind 127.0.0.1 $PORT")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("start printed %q: %v", out, err)
	}
	if v.State != protocol.ServiceReady || v.Port == 0 {
		t.Fatalf("a service listening on its port: %+v", v)
	}
	var ep api.ServiceEndpoint
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "endpoint", ws.ID, "web", "--json")), &ep); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ep.DirectURL)
	if err != nil || u.Port() != fmt.Sprint(v.Port) || ep.Port != v.Port {
		t.Fatalf("endpoint %+v is not on the allotted port %d", ep, v.Port)
	}
	t.Logf("service-readiness (integration): 1 service ignoring its port refused with timeout, 1 listening on it ready on port %d and verified", v.Port)
}
