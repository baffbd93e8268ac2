package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// hostileRunners is a controller whose runner binary is integration/hostilerunner: the real
// runner unless a plan names an attack for the next runner to start.
type hostileRunners struct {
	c    *controllerProc
	plan string
}

func startHostileRunners(t *testing.T, extra ...string) *hostileRunners {
	t.Helper()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	runnerBin := filepath.Join(dir, "tether-runner")
	real, err := filepath.Abs(bin("tether-runner"))
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", runnerBin,
		"-ldflags", "-X main.planFile="+plan+" -X main.realRunner="+real, "./hostilerunner")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hostile runner: %v\n%s", err, out)
	}
	args := append([]string{"--runner-bin", runnerBin}, extra...)
	return &hostileRunners{c: startController(t, serveOpts{extraArgs: args}), plan: plan}
}

// workspace creates a workspace whose runner carries out mode ("" for an honest one).
func (h *hostileRunners) workspace(t *testing.T, mode string) api.Workspace {
	t.Helper()
	if err := os.WriteFile(h.plan, []byte(mode), 0o644); err != nil {
		t.Fatal(err)
	}
	return h.c.createWorkspace(t)
}

// reports reads what the hostile runners wrote about themselves.
func (h *hostileRunners) reports(t *testing.T) []map[string]any {
	f, err := os.Open(h.plan + ".report")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// peakRSS is the controller's peak resident memory, in bytes (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// controllerMemoryBound is what the controller may reach, whatever its runners send: the budget
// per runner (16 streams and a 64-stream backlog of windows, frames grown only as bytes arrive)
// is far below it, and before the budget one flood alone took the controller to 1.5 GB.
const controllerMemoryBound = 400 << 20

// A runner is untrusted: whatever it sends, the controller's memory stays bounded, each attack
// gets its typed error and publishes nothing, a runner that keeps pushing is cut off with an
// event, and an honest workspace beside the attackers keeps working.
func TestHostileRunner(t *testing.T) {
	h := startHostileRunners(t,
		"--runner-idle-timeout", "3s", "--max-snapshot-bytes", strconv.Itoa(48<<20), "--max-manifest-entries", "1000")
	cl := h.c.Client(t)
	ctx := context.Background()
	honest := h.workspace(t, "")
	tried, held := 0, 0
	check := func(what string, ok bool, format string, args ...any) {
		t.Helper()
		tried++
		if ok {
			held++
			return
		}
		t.Errorf(what+": "+format, args...)
	}
	honestWorks := func(after string) {
		t.Helper()
		res := h.c.cli(t, nil, "exec", honest.ID, "--", "sh", "-c", "echo ok > after.txt && cat after.txt")
		check("honest workspace after "+after, res.Code == 0 && strings.TrimSpace(res.Stdout) == "ok",
			"exec: code %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}

	// Captures that lie: each refused with its code, nothing stored, no receipt.
	for _, tc := range []struct {
		mode string
		code protocol.Code
	}{
		{"junk-capture", protocol.CodeCorrupt},
		{"lying-manifest", protocol.CodeCorrupt},
		{"foreign-manifest", protocol.CodeCorrupt},
		{"lying-summary", protocol.CodeCorrupt},
		{"huge-manifest", protocol.CodeTooLarge},
		{"oversize-capture", protocol.CodeTooLarge},
		{"silent-capture", protocol.CodeTimeout},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ws := h.workspace(t, tc.mode)
			res := h.c.cli(t, nil, "snapshot", "create", ws.ID)
			check(tc.mode, res.Code != 0 && strings.Contains(res.Stderr, "error: "+string(tc.code)+":"),
				"snapshot create: code %d, stderr %q; want error %s", res.Code, res.Stderr, tc.code)
			snaps, err := cl.ListSnapshots(ctx, ws.ID)
			check(tc.mode+" publishes nothing", err == nil && len(snaps) == 0, "receipts %v (%v)", snaps, err)
			objects, _ := filepath.Glob(filepath.Join(h.c.Data, "blobs", "snapshots", ws.ID, "*"))
			check(tc.mode+" stores nothing", len(objects) == 0, "objects left: %v", objects)
		})
	}
	// The control: the same fake archive, honest, gets a receipt — the refusals above are for
	// the lies, not for the way the hostile runner builds archives.
	t.Run("valid-capture", func(t *testing.T) {
		ws := h.workspace(t, "valid-capture")
		res := h.c.cli(t, nil, "snapshot", "create", ws.ID)
		check("valid fake capture", res.Code == 0, "snapshot create: code %d, stderr %q", res.Code, res.Stderr)
	})
	honestWorks("lying captures")

	// A runner whose run log breaks the offset rule (a gap back into bytes it sent): the
	// controller passes the bytes before it and ends the read with corrupt, never the gap.
	t.Run("lying-run-log", func(t *testing.T) {
		ws := h.workspace(t, "lying-run-log")
		res := h.c.cli(t, nil, "exec", "--detach", ws.ID, "--", "true")
		run := strings.TrimSpace(res.Stdout)
		check("lying-run-log start", res.Code == 0 && strings.HasPrefix(run, "run_"), "exec --detach: code %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.c.Addr+"/v1/runs/"+run+"/logs", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", protocol.Bearer(h.c.Token))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET logs: %v", err)
		}
		defer resp.Body.Close()
		var chans []protocol.Channel
		var last []byte
		for {
			ch, p, err := protocol.ReadFrame(resp.Body, nil)
			if err != nil {
				break
			}
			chans, last = append(chans, ch), append([]byte(nil), p...)
		}
		var e protocol.Error
		_ = json.Unmarshal(last, &e)
		check("lying-run-log refused", slices.Equal(chans, []protocol.Channel{protocol.ChanStdout, protocol.ChanError}) && e.Code == protocol.CodeCorrupt,
			"HTTP %d, frames %v, last %s; want stdout then a corrupt error", resp.StatusCode, chans, last)
		res = h.c.cli(t, nil, "run", "logs", run)
		check("lying-run-log CLI", res.Code != 0 && res.Stdout == "hello\n" && strings.Contains(res.Stderr, "error: corrupt:"),
			"run logs: code %d, stdout %q, stderr %q; want hello and error corrupt", res.Code, res.Stdout, res.Stderr)
	})

	// A runner whose tree export attacks the host: `tether cp WS:PATH DEST` fails, DEST does
	// not appear, nothing is written beside it or through a symlink, no staging is left.
	t.Run("hostile-export", func(t *testing.T) {
		ws := h.workspace(t, "hostile-export")
		// The controller's relay refuses what it can judge (corrupt); a path through a symlink
		// the runner sent is the host extractor's to refuse.
		for attack, code := range map[string]protocol.Code{"dotdot": protocol.CodeCorrupt, "beside": protocol.CodeCorrupt,
			"symlink": protocol.CodeSymlinkRefused, "lie": protocol.CodeCorrupt} {
			host := t.TempDir()
			dest := filepath.Join(host, "sub", "dest")
			if err := os.Mkdir(filepath.Dir(dest), 0o755); err != nil {
				t.Fatal(err)
			}
			res := h.c.cli(t, nil, "cp", ws.ID+":"+attack, dest)
			ents, _ := os.ReadDir(filepath.Dir(dest))
			top, _ := os.ReadDir(host)
			_, escaped := os.Lstat("/tmp/escaped")
			check("hostile export "+attack, res.Code == code.ExitCode() && strings.HasPrefix(res.Stderr, "error: "+string(code)+": ") && len(ents) == 0 && len(top) == 1 && escaped != nil,
				"cp: code %d, stderr %q; %d entries left in the destination's parent, %d beside it", res.Code, res.Stderr, len(ents), len(top))
		}
	})

	// A runner that says the service it was given a port for listens on the controller's own
	// port: refused, and no endpoint is published.
	t.Run("spoof-port", func(t *testing.T) {
		ws := h.workspace(t, "spoof-port")
		res := h.c.cli(t, nil, "service", "start", ws.ID, "web", "--port", "auto", "--", "sleep", "600")
		check("spoofed service port", res.Code != 0 && strings.Contains(res.Stderr, "error: conflict:"),
			"service start: code %d, stderr %q; want error conflict", res.Code, res.Stderr)
		res = h.c.cli(t, nil, "service", "endpoint", ws.ID, "web")
		check("spoofed service endpoint", res.Code != 0, "service endpoint: code %d, stdout %q", res.Code, res.Stdout)
	})

	// Floods: the runner opens 150 streams at once, announcing 4 MiB frames and sending all
	// but the last byte, or sending junk after a valid request and never closing. Each runner is
	// cut off once over budget, with an event; memory stays bounded.
	for _, mode := range []string{"flood", "flood-after-header"} {
		t.Run(mode, func(t *testing.T) {
			ws := h.workspace(t, mode)
			var cause string
			eventually(t, 2*time.Minute, "an over-budget event for "+ws.ID, func() bool {
				evs, err := cl.ListEvents(ctx, ws.ID)
				if err != nil {
					return false
				}
				for _, e := range evs {
					if strings.Contains(e.Cause, "over budget") {
						cause = e.Cause
						return true
					}
				}
				return false
			})
			check(mode+" event", strings.Contains(cause, "disconnected"), "event %q", cause)
		})
		honestWorks(mode)
	}

	peak := peakRSS(t, h.c.cmd.Process.Pid)
	check("controller memory", peak < controllerMemoryBound, "peak RSS %d MiB, bound %d MiB", peak>>20, controllerMemoryBound>>20)
	var floods []string
	for _, r := range h.reports(t) {
		if r["event"] == "flooded" {
			b, _ := json.Marshal(r)
			floods = append(floods, string(b))
		}
	}
	t.Logf("hostile-runner: %d attacks tried, %d held; controller peak RSS %d MiB (bound %d MiB); floods: %s",
		tried, held, peak>>20, controllerMemoryBound>>20, strings.Join(floods, " "))
}
