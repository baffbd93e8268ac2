package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// composeFile is the example stack under test, as a user runs it.
const composeFile = "../deploy/compose/docker-compose.yml"

// controllerUID owns the controller image's data directory (.ci/images, Dockerfile).
const controllerUID = 65532

// composeStack is one docker-compose project of deploy/compose, with a name of its own so that
// nothing it makes can be confused with anything else on the daemon.
type composeStack struct {
	t       *testing.T
	project string
	env     []string
}

// compose runs docker-compose on the stack and returns its output, failing t when it fails.
func (s *composeStack) compose(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...)
	if err != nil {
		s.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *composeStack) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-f", composeFile, "-p", s.project}, args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// psql runs one query in the stack's PostgreSQL as its tether user and returns the rows.
func (s *composeStack) psql(query string, args ...string) []string {
	s.t.Helper()
	cmd := append([]string{"exec", "-T", "postgres", "psql", "-U", "tether", "-d", "tether", "-v", "ON_ERROR_STOP=1", "-tA"}, args...)
	out := strings.TrimSpace(s.compose(append(cmd, "-c", query)...))
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// objects lists the keys in the stack's MinIO bucket, through the stack's own client container.
func (s *composeStack) objects() []string {
	s.t.Helper()
	out := s.compose("run", "--rm", "-T", "--entrypoint", "mc", "buckets", "ls", "--recursive", "--json", "minio/tether")
	var keys []string
	for _, line := range strings.Split(out, "\n") {
		var o struct {
			Status string `json:"status"`
			Key    string `json:"key"`
		}
		if json.Unmarshal([]byte(line), &o) == nil && o.Status == "success" {
			keys = append(keys, o.Key)
		}
	}
	return keys
}

// docker runs the docker CLI and returns its trimmed output, failing t when it fails.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// labelled lists the names of docker objects of a kind (container, network, volume) carrying label.
func labelled(t *testing.T, kind, label string) []string {
	t.Helper()
	args := []string{kind, "ls", "-q", "--filter", "label=" + label}
	if kind == "container" {
		args = []string{"ps", "-a", "-q", "--filter", "label=" + label}
	}
	return strings.Fields(docker(t, args...))
}

// groupOf is the owning group of a file, as a number.
func groupOf(fi os.FileInfo) string {
	return strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Gid), 10)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// composeImages builds the images the stack runs, FROM scratch and without a registry: the
// controller from the binaries under test every time, the rest when missing.
func composeImages(t *testing.T) {
	t.Helper()
	build := func(script string, args ...string) {
		out, err := exec.Command(script, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
		}
	}
	build("../.ci/images", binDir, "controller")
	if exec.Command("docker", "image", "inspect", dockerImage).Run() != nil {
		build("../.ci/images", binDir, "runner")
	}
	var missing []string
	for _, img := range []string{"postgres", "minio", "mc"} {
		if exec.Command("docker", "image", "inspect", "tether-"+img+":dev").Run() != nil {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		build("../.ci/stack-images", missing...)
	}
}

// TestComposeStack brings deploy/compose up as a user would (controller, PostgreSQL, MinIO, the
// bucket), with images built here, and follows a Docker workspace through it: its record lands in
// PostgreSQL, its saves in MinIO; the controller stops cleanly on SIGTERM and, started again,
// reopens the workspace from the save in MinIO. Then `down -v` leaves nothing behind.
func TestComposeStack(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a docker-compose stack")
	}
	dockerEngine(t) // skips (or fails under CI) without a daemon
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but docker-compose is missing: .ci/deps compose installs it")
		}
		t.Skip("no docker-compose: .ci/deps compose installs it")
	}
	composeImages(t)

	// The data directory is mounted at its own path: the Docker provider mounts the runner socket
	// below it into workspace containers by its path on the host.
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, controllerUID, controllerUID); err != nil {
		t.Fatal(err)
	}
	// The stack mounts the daemon's socket into the controller: the one DOCKER_HOST names, if a
	// local one, else the default.
	sockPath := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		p, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			t.Skipf("DOCKER_HOST=%s is not a local socket, which the stack mounts into the controller", h)
		}
		sockPath = p
	}
	sock, err := os.Stat(sockPath)
	if err != nil {
		t.Skipf("the stack mounts the Docker socket %s: %v", sockPath, err)
	}
	s := &composeStack{t: t, project: "tethertest" + randomHex(t, 6), env: []string{
		"TETHER_POSTGRES_PASSWORD=" + randomHex(t, 16),
		"TETHER_S3_SECRET_KEY=" + randomHex(t, 16),
		"TETHER_DOCKER_GID=" + groupOf(sock),
		"TETHER_DOCKER_SOCKET=" + sockPath,
		"TETHER_DATA_DIR=" + data,
		"TETHER_PUBLISH=127.0.0.1:", // a free port, on loopback only
		"TETHER_POSTGRES_IMAGE=tether-postgres:dev",
		"TETHER_MINIO_IMAGE=tether-minio:dev",
		"TETHER_MC_IMAGE=tether-mc:dev",
		"TETHER_CONTROLLER_IMAGE=tether-controller:dev",
	}}
	var workspaces []string
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.run("logs", "--no-color", "--tail", "200")
			t.Logf("docker-compose logs:\n%s", out)
		}
		if out, err := s.run("down", "-v", "--remove-orphans", "-t", "30"); err != nil {
			t.Logf("docker-compose down: %v\n%s", err, out)
		}
		// Sandboxes are the controller's, not compose's: a test that failed before removing its
		// workspace removes them here.
		for _, id := range workspaces {
			for _, kind := range []string{"container", "network"} {
				for _, obj := range labelled(t, kind, "tether.workspace="+id) {
					t.Logf("removing leftover %s %s", kind, obj)
					if kind == "container" {
						_ = exec.Command("docker", "rm", "-f", "-v", obj).Run()
					} else {
						_ = exec.Command("docker", "network", "rm", obj).Run()
					}
				}
			}
		}
	})

	s.compose("up", "-d")
	addr := "http://" + strings.TrimSpace(s.compose("port", "controller", "7420"))
	if !strings.HasPrefix(addr, "http://127.0.0.1:") {
		t.Fatalf("controller published on %s, want 127.0.0.1 only", addr)
	}
	waitHealthy(t, addr)
	ctl := &controllerProc{t: t, Addr: addr, Data: data}

	// A workspace on the default provider, docker, through the mounted socket.
	var ws api.Workspace
	out := ctl.mustCLI(t, "workspace", "create", "--name", "deployed", "--json")
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("workspace create --json printed %q: %v", out, err)
	}
	workspaces = append(workspaces, ws.ID)
	if ws.State != api.StateReady || ws.Provider != "docker" {
		t.Fatalf("workspace %+v: want ready on docker", ws)
	}
	if got := labelled(t, "container", "tether.workspace="+ws.ID); len(got) != 1 {
		t.Fatalf("containers of %s: %v, want one", ws.ID, got)
	}
	const content = "made in a compose stack\n"
	ctl.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "printf '"+strings.TrimSuffix(content, "\n")+"\\n' >/workspace/proof.txt")

	// The record is in PostgreSQL, not in the data directory.
	if rows := s.psql("select name || ' ' || provider || ' ' || state from workspaces where id = '" + ws.ID + "'"); len(rows) != 1 || rows[0] != "deployed docker ready" {
		t.Fatalf("workspaces row in PostgreSQL: %q", rows)
	}
	if _, err := os.Stat(filepath.Join(data, "tether.db")); !os.IsNotExist(err) {
		t.Fatalf("a SQLite state file in the data directory (%v): the controller did not use PostgreSQL", err)
	}

	// Close saves to MinIO: every receipt PostgreSQL holds has its objects in the bucket.
	ctl.mustCLI(t, "workspace", "close", ws.ID)
	if rows := s.psql("select state from workspaces where id = '" + ws.ID + "'"); len(rows) != 1 || rows[0] != "closed" {
		t.Fatalf("after close, PostgreSQL says %q", rows)
	}
	snaps := s.psql("select id from snapshots where workspace_id = '" + ws.ID + "'")
	if len(snaps) == 0 {
		t.Fatal("close saved no snapshot receipt in PostgreSQL")
	}
	keys := strings.Join(s.objects(), "\n")
	for _, snap := range snaps {
		for _, suffix := range []string{".tar.zst.age", ".manifest.zst.age"} {
			if !strings.Contains(keys, ws.ID+"/"+snap+suffix) {
				t.Fatalf("no object %s/%s%s in MinIO; the bucket holds:\n%s", ws.ID, snap, suffix, keys)
			}
		}
		ctl.mustCLI(t, "snapshot", "verify", snap)
	}

	// SIGTERM: the controller drains and exits 0 within the stop grace period, not killed.
	s.compose("stop", "-t", "30", "controller")
	id := strings.TrimSpace(s.compose("ps", "-q", "controller"))
	if code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", id); code != "0" {
		t.Fatalf("controller exited %s on SIGTERM, want 0", code)
	}
	s.compose("start", "controller")
	addr = "http://" + strings.TrimSpace(s.compose("port", "controller", "7420"))
	waitHealthy(t, addr)
	ctl.Addr = addr

	// A new container, restored from MinIO by the restarted controller.
	ctl.mustCLI(t, "workspace", "reopen", ws.ID)
	if got := ctl.mustCLI(t, "exec", ws.ID, "--", "cat", "/workspace/proof.txt"); got != content {
		t.Fatalf("after reopen, proof.txt holds %q, want %q", got, content)
	}
	ctl.mustCLI(t, "workspace", "rm", ws.ID)
	for _, kind := range []string{"container", "network"} {
		if got := labelled(t, kind, "tether.workspace="+ws.ID); len(got) != 0 {
			t.Fatalf("workspace rm left %ss %v", kind, got)
		}
	}

	// down -v: no container, network or volume of the project stays, anonymous ones included.
	var anon []string
	for _, c := range strings.Fields(s.compose("ps", "-q")) {
		anon = append(anon, strings.Fields(docker(t, "inspect", "-f", `{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}`, c))...)
	}
	if len(anon) < 3 { // postgres, minio and the controller image's /data
		t.Fatalf("volumes of the stack: %v, want at least 3", anon)
	}
	s.compose("down", "-v", "--remove-orphans", "-t", "30")
	for _, kind := range []string{"container", "network", "volume"} {
		if got := labelled(t, kind, "com.docker.compose.project="+s.project); len(got) != 0 {
			t.Errorf("down -v left %ss %v", kind, got)
		}
	}
	for _, v := range anon {
		if exec.Command("docker", "volume", "inspect", v).Run() == nil {
			t.Errorf("down -v left volume %s", v)
		}
	}
}

// waitHealthy waits for the controller's /healthz to answer 200 (image start, migrations).
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	eventually(t, 3*time.Minute, addr+"/healthz", func() bool {
		resp, err := hc.Get(addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
