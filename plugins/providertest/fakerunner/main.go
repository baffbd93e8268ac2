// Command fakerunner stands in for tether-runner in the provider contract
// suite (plugins/providertest). Started by a provider, it reports what it
// was started with (its environment, token, working directory, user, and
// whether the file it leaves in the workspace survived from an earlier
// start) to the suite's fake controller, then waits for SIGTERM and reports
// that too. It is static (CGO_ENABLED=0) so it runs in any sandbox.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// version is set with -ldflags "-X main.version=...", so the suite can tell
// an installed replacement from the original.
var version = "dev"

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
	if err := post(url+"/providertest/report", r); err != nil {
		fmt.Fprintln(os.Stderr, "fakerunner:", err)
		os.Exit(1)
	}
	<-term
	r.Kind = "bye"
	r.Env = nil
	_ = post(url+"/providertest/report", r)
}

// post sends one report, retrying while the controller is not reachable.
func post(url string, r report) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var last error
	for i := 0; i < 100; i++ {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
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
