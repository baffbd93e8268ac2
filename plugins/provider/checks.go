package provider

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Checks every provider makes on what the controller hands it, shared so that all providers
// refuse the same inputs with the same codes.

// CheckToken accepts a bootstrap token that is safe to pass in an environment or a quoted
// boot file: present, with no NUL or newline.
func CheckToken(token string) error {
	if token == "" || strings.ContainsAny(token, "\x00\n") {
		return Errorf(CodeInvalidArgument, "runner token is required")
	}
	return nil
}

// CheckControllerURL accepts an absolute URL with a host.
func CheckControllerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || strings.ContainsAny(s, "\x00\n") {
		return Errorf(CodeInvalidArgument, "controller URL %q is not an absolute URL", s)
	}
	return nil
}

// CheckRunnerBinary accepts an absolute path to an executable regular file.
func CheckRunnerBinary(path string) error {
	if !filepath.IsAbs(path) {
		return Errorf(CodeInvalidArgument, "runner binary %q must be an absolute path", path)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Errorf(CodeNotFound, "runner binary %s does not exist", path)
	}
	if err != nil {
		return Errorf(CodeProviderFailed, "runner binary: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return Errorf(CodeInvalidArgument, "runner binary %s is not an executable file", path)
	}
	return nil
}

// reservedEnv are set by every provider itself; a request's Env may not override them.
var reservedEnv = map[string]bool{
	EnvControllerURL: true, EnvRunnerToken: true, EnvAllocationID: true, EnvWorkspaceID: true, EnvWorkspaceRoot: true,
	EnvIsolation: true, EnvAgentUID: true, EnvAgentGID: true, EnvUsageSource: true,
}

// CheckEnv refuses malformed variables and the ones the provider sets itself.
func CheckEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return Errorf(CodeInvalidArgument, "invalid environment variable %q", k)
		}
		if reservedEnv[k] {
			return Errorf(CodeInvalidArgument, "environment variable %s is set by the provider", k)
		}
	}
	return nil
}

// Check validates what every provider needs of a start request: a fresh token and, when given,
// a new controller URL.
func (r StartRequest) Check() error {
	if err := CheckToken(r.RunnerToken); err != nil {
		return err
	}
	if r.ControllerURL != "" {
		return CheckControllerURL(r.ControllerURL)
	}
	return nil
}

// Check validates what every provider needs of a create request; providers add their own
// checks (options, names) on top.
func (r CreateRequest) Check() error {
	if r.WorkspaceID == "" || strings.ContainsAny(r.WorkspaceID, "\x00\n") {
		return Errorf(CodeInvalidArgument, "workspace id is required")
	}
	if err := CheckToken(r.RunnerToken); err != nil {
		return err
	}
	if err := CheckControllerURL(r.ControllerURL); err != nil {
		return err
	}
	if err := CheckRunnerBinary(r.RunnerBinary); err != nil {
		return err
	}
	if s := r.ControllerSocket; s != "" && (!filepath.IsAbs(s) || filepath.Clean(s) != s || strings.ContainsAny(s, "\x00\n")) {
		return Errorf(CodeInvalidArgument, "controller socket %q must be a clean absolute path", s)
	}
	for k, v := range r.Labels {
		// tether.* labels are how providers recognise what they own.
		if k == "" || strings.HasPrefix(k, "tether.") || strings.ContainsRune(k+v, 0) {
			return Errorf(CodeInvalidArgument, "label %q is reserved or invalid", k)
		}
	}
	return CheckEnv(r.Env)
}

// Locks serialises operations on one allocation within a provider process.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Lock takes the allocation's lock and returns its release.
func (l *Locks) Lock(id string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[id]
	if !ok {
		m = &sync.Mutex{}
		l.locks[id] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}
