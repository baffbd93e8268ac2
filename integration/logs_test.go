package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonController is `tether serve --log-format json` in a process group of its own, as systemd
// runs a service: its log parsed line by line (a line that is not a JSON record fails the test).
type jsonController struct {
	cmd   *exec.Cmd
	addr  string
	token string
	data  string
	read  chan struct{} // closed once stderr is read to its end
	lines []map[string]any
	raw   []string
	// collect parses the lines read so far and those to come, until stop says so (nil: to the
	// end of the log).
	collect func(stop func(map[string]any) bool)
}

func startJSONController(t *testing.T, listen string, extra ...string) *jsonController {
	t.Helper()
	data := t.TempDir()
	args := append([]string{"serve", "--data", data, "--listen", listen, "--log-format", "json"}, extra...)
	cmd := exec.Command(bin("tether"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &jsonController{cmd: cmd, data: data, read: make(chan struct{})}
	// Read at once whatever the test does meanwhile: a controller blocked on its log would hang.
	lines := make(chan string, 1<<16)
	go func() {
		defer close(j.read)
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-j.read
		_ = cmd.Wait()
		killRunnersUnder(data)
		if t.Failed() {
			t.Logf("controller log:\n%s", strings.Join(j.raw, "\n"))
		}
	})
	j.collect = func(stop func(map[string]any) bool) {
		for line := range lines {
			j.raw = append(j.raw, line)
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("log line is not JSON: %q", line)
				continue
			}
			j.lines = append(j.lines, rec)
			if stop != nil && stop(rec) {
				return
			}
		}
	}
	if listen != "127.0.0.1:0" {
		j.addr = "http://" + listen
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			j.collect(func(rec map[string]any) bool {
				if rec["msg"] == "controller listening" {
					j.addr = "http://" + fmt.Sprint(rec["addr"])
					return true
				}
				return false
			})
		}()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("controller did not log that it listens")
		}
		if j.addr == "" {
			t.Fatalf("controller ended before it listened:\n%s", strings.Join(j.raw, "\n"))
		}
	}
	eventually(t, 30*time.Second, "the operator token", func() bool {
		b, err := os.ReadFile(filepath.Join(data, "operator.token"))
		j.token = strings.TrimSpace(string(b))
		return err == nil && j.token != ""
	})
	eventually(t, 30*time.Second, "the controller to answer", func() bool {
		resp, err := http.Get(j.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return j
}

// get makes an API request with an X-Request-Id; it returns the status and the id answered.
func (j *jsonController) get(t *testing.T, path, requestID string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", j.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+j.token)
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Request-Id")
}

func (j *jsonController) cli(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(bin("tether"), args...)
	cmd.Env = append(os.Environ(), "TETHER_ADDR="+j.addr, "TETHER_DATA="+j.data, "TETHER_TOKEN=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tether %v: %v\n%s", args, err, out)
	}
}

// stopGroup sends SIGTERM to the controller's whole process group (its provider plugins too, as
// systemd's stop does) and reads the log to its end.
func (j *jsonController) stopGroup(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-j.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	j.collect(nil)
	if err := j.cmd.Wait(); err != nil {
		t.Fatalf("controller after SIGTERM: %v", err)
	}
}

// TestJSONLogs: with --log-format json every line the controller writes is a JSON record; each
// API request has one, carrying the request id the client sent (and echoed), or one the
// controller made when the client's was malformed; a SIGTERM to the process group logs
// "controller stopped" at info and no error (the provider plugins outlive the signal and are
// ended by the controller, not by it).
func TestJSONLogs(t *testing.T) {
	j := startJSONController(t, "127.0.0.1:0")
	j.cli(t, "provider", "ls") // starts every provider plugin

	code, echoed := j.get(t, "/v1/workspaces/ws_0000000000000000", "tether-test.42")
	if code != http.StatusNotFound || echoed != "tether-test.42" {
		t.Fatalf("GET missing workspace: %d, request id %q", code, echoed)
	}
	bad := "two words " + strings.Repeat("x", 200)
	_, made := j.get(t, "/v1/workspaces", bad)
	if made == "" || made == bad || !strings.HasPrefix(made, "req_") {
		t.Fatalf("a malformed request id came back as %q", made)
	}
	j.get(t, "/healthz", "health-1") // quiet: logged at debug only
	j.stopGroup(t)

	find := func(id string) map[string]any {
		for _, rec := range j.lines {
			if rec["msg"] == "request" && rec["request_id"] == id {
				return rec
			}
		}
		return nil
	}
	rec := find("tether-test.42")
	if rec == nil {
		t.Fatal("no request log line with the client's request id")
	}
	want := map[string]any{"level": "INFO", "method": "GET", "route": "GET /v1/workspaces/{id}", "status": float64(404), "code": "not_found"}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("request log %s = %v, want %v (%v)", k, rec[k], v, rec)
		}
	}
	if _, ok := rec["duration_ms"].(float64); !ok {
		t.Errorf("request log has no duration_ms: %v", rec)
	}
	if _, ok := rec["bytes_out"].(float64); !ok {
		t.Errorf("request log has no bytes_out: %v", rec)
	}
	if find(made) == nil {
		t.Error("no request log line with the id the controller made")
	}
	if find("health-1") != nil {
		t.Error("a health check was logged at info")
	}
	stopped := false
	for i, rec := range j.lines {
		if rec["level"] == "ERROR" || strings.Contains(j.raw[i], "plugin process exited") && rec["level"] != "DEBUG" {
			t.Errorf("logged at shutdown: %s", j.raw[i])
		}
		if rec["msg"] == "controller stopped" && rec["level"] == "INFO" {
			stopped = true
		}
	}
	if !stopped {
		t.Error(`no "controller stopped" at info`)
	}
}

// TestLogLevel: --log-level warn drops every info and debug line (requests included), and a
// level or format out of their sets is refused before anything starts.
func TestLogLevel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	j := startJSONController(t, addr, "--log-level", "warn")
	j.cli(t, "provider", "ls")
	j.get(t, "/v1/workspaces", "quiet-1")
	j.stopGroup(t)
	for i, rec := range j.lines {
		if rec["level"] != "WARN" && rec["level"] != "ERROR" {
			t.Errorf("logged below warn: %s", j.raw[i])
		}
	}

	for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "xml"}} {
		data := t.TempDir()
		cmd := exec.Command(bin("tether"), append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(string(out), "error: invalid_argument: "+args[0]) {
			t.Errorf("serve %v: %v, %q", args, err, out)
		}
		if ents, _ := os.ReadDir(data); len(ents) != 0 {
			t.Errorf("serve %v refused, but wrote %d entries into its data dir", args, len(ents))
		}
	}
}
