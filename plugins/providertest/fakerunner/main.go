// Command fakerunner stands in for tether-runner in the provider contract
// suite (plugins/providertest). Started by a provider, it reports what it
// was started with (its environment, token, working directory, user, and
// whether the file it leaves in the workspace survived from an earlier
// start) to the suite's fake controller, then waits for SIGTERM and reports
// that too. It is static (CGO_ENABLED=0) so it runs in any sandbox.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// version is set with -ldflags "-X main.version=...", so the suite can tell
// an installed replacement from the original.
var version = "dev"

// oPath is Linux's O_PATH, which package syscall does not name.
const oPath = 0x200000

// reportPath is where the fake controller takes reports.
const reportPath = "/providertest/report"

// markerName is the file the fake runner leaves in the workspace root.
const markerName = ".providertest-marker"

// report mirrors providertest.Hello.
type report struct {
	Kind         string   `json:"kind"` // hello or bye
	Version      string   `json:"version"`
	Allocation   string   `json:"allocation"`
	Workspace    string   `json:"workspace"`
	Token        string   `json:"token"`
	TokenInEnv   bool     `json:"token_in_env"`
	Root         string   `json:"root"`
	Cwd          string   `json:"cwd"`
	UID          int      `json:"uid"`
	GID          int      `json:"gid"`
	PID          int      `json:"pid"`
	Env          []string `json:"env"`
	MarkerBefore string   `json:"marker_before"`
	RootWritable bool     `json:"root_writable"`
	Error        string   `json:"error,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("fakerunner", version)
		return
	}
	// Like the real runner: take the token out of the environment first.
	token := os.Getenv("TETHER_RUNNER_TOKEN")
	os.Unsetenv("TETHER_RUNNER_TOKEN")
	url := os.Getenv("TETHER_CONTROLLER_URL")
	hc, url, err := controllerClient(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakerunner:", err)
		os.Exit(1)
	}
	// Like the real runner asked for uid isolation as root: from here on its file access is
	// the agent's (and the controller socket's ancestors may be closed to it: controllerClient
	// holds the socket's directory open).
	if os.Getenv("TETHER_ISOLATION") == "uid" && os.Geteuid() == 0 {
		if err := actAsAgentOnFiles(os.Getenv("TETHER_AGENT_UID"), os.Getenv("TETHER_AGENT_GID")); err != nil {
			fmt.Fprintln(os.Stderr, "fakerunner:", err)
			os.Exit(1)
		}
	}

	r := report{
		Kind: "hello", Version: version, Token: token,
		Allocation: os.Getenv("TETHER_ALLOCATION_ID"), Workspace: os.Getenv("TETHER_WORKSPACE_ID"),
		Root: os.Getenv("TETHER_WORKSPACE_ROOT"), UID: os.Getuid(), GID: os.Getgid(), PID: os.Getpid(),
	}
	r.Cwd, _ = os.Getwd()
	for _, kv := range os.Environ() {
		// The token must not be visible to what the runner starts; report
		// whether it was, never its value twice.
		if len(kv) >= 20 && kv[:20] == "TETHER_RUNNER_TOKEN=" {
			r.TokenInEnv = true
			continue
		}
		r.Env = append(r.Env, kv)
	}
	if r.Root != "" {
		marker := filepath.Join(r.Root, markerName)
		b, err := os.ReadFile(marker)
		switch {
		case err == nil:
			r.MarkerBefore = string(b)
		case !errors.Is(err, fs.ErrNotExist):
			r.Error = err.Error()
		default:
			err = os.WriteFile(marker, []byte("written by "+r.Allocation), 0o600)
			if err != nil {
				r.Error = err.Error()
			}
		}
		r.RootWritable = r.Error == ""
	}

	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	if err := post(hc, url+reportPath, r); err != nil {
		fmt.Fprintln(os.Stderr, "fakerunner:", err)
		os.Exit(1)
	}
	<-term
	r.Kind = "bye"
	r.Env = nil
	_ = post(hc, url+reportPath, r)
}

// controllerClient returns the client and base URL the reports go to. A controller URL
// unix:///DIR/NAME is a socket (the controller's runner socket, as a provider mounted it): as
// the real runner does, the fake one opens DIR now and dials /proc/self/fd/N/NAME.
func controllerClient(url string) (*http.Client, string, error) {
	sock, ok := strings.CutPrefix(url, "unix://")
	if !ok {
		return http.DefaultClient, url, nil
	}
	fd, err := syscall.Open(filepath.Dir(sock), oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("controller socket directory: %w", err)
	}
	path := fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(sock))
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}, "http://controller", nil
}

// actAsAgentOnFiles sets the file uid and gid of every thread, as the real runner does.
func actAsAgentOnFiles(uid, gid string) error {
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if err1 != nil || err2 != nil || u <= 0 || g <= 0 {
		return fmt.Errorf("agent ids %q:%q", uid, gid)
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return err
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSGID, uintptr(g), 0, 0); e != 0 {
		return e
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSUID, uintptr(u), 0, 0); e != 0 {
		return e
	}
	return nil
}

// post sends one report, retrying while the controller is not reachable.
func post(hc *http.Client, url string, r report) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var last error
	for i := 0; i < 100; i++ {
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
			err = fmt.Errorf("controller answered %s", resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return last
}
