// FAKE — not Daytona. The toolbox's processes in the in-repo stand-in for
// the Daytona REST API: process/execute and process sessions, run as real
// local processes in the sandbox's directory.

package fake

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// command starts sh -c text in the sandbox's directory, in a process group
// of its own, with a minimal environment (as a fresh sandbox shell has);
// mu held. The text is recorded as Daytona logs it.
func (s *Server) command(b *box, text string, out *strings.Builder) (*proc, error) {
	s.commands = append(s.commands, text)
	cmd := exec.Command("/bin/sh", "-c", text)
	cmd.Dir = b.dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + b.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// execute is POST process/execute {command, timeout}: the command runs to
// its end (killed after timeout seconds, 10 by default) and the answer is
// {exitCode, result}.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Command == "" {
		tbError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	out := &strings.Builder{}
	var p *proc
	s.started(w, r, func(b *box) {
		var err error
		if p, err = s.command(b, in.Command, out); err != nil {
			tbError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		b.execs = append(b.execs, p)
	})
	if p == nil {
		return
	}
	timeout := time.Duration(in.Timeout) * time.Second
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		tbError(w, r, http.StatusRequestTimeout, "command timed out")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": p.cmd.ProcessState.ExitCode(), "result": out.String()})
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SessionID == "" {
		tbError(w, r, http.StatusBadRequest, "sessionId is required")
		return
	}
	s.started(w, r, func(b *box) {
		if b.sessions[in.SessionID] != nil {
			tbError(w, r, http.StatusConflict, "session already exists")
			return
		}
		b.sessions[in.SessionID] = &session{}
		w.WriteHeader(http.StatusCreated)
	})
}

// sessions is GET process/session: [{sessionId, commands}].
func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	s.started(w, r, func(b *box) {
		out := []map[string]any{}
		for id, se := range b.sessions {
			cmds := []map[string]any{}
			for i, c := range se.commands {
				cmds = append(cmds, map[string]any{"id": id + "-" + string(rune('a'+i%26)), "command": c})
			}
			out = append(out, map[string]any{"sessionId": id, "commands": cmds})
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// deleteSession is DELETE process/session/{sessionId}: the session's
// processes get SIGTERM, then SIGKILL after the grace (SessionGrace).
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	var procs []*proc
	var grace time.Duration
	found := false
	s.started(w, r, func(b *box) {
		se := b.sessions[r.PathValue("session")]
		if se == nil {
			tbError(w, r, http.StatusNotFound, "session not found")
			return
		}
		delete(b.sessions, r.PathValue("session"))
		procs, grace, found = se.procs, s.grace, true
	})
	if !found {
		return
	}
	for _, p := range procs {
		p.term(grace)
	}
	w.WriteHeader(http.StatusNoContent)
}

// exec is POST process/session/{sessionId}/exec {command, runAsync}. With
// runAsync the answer is 202 {cmdId} at once; otherwise the fake waits and
// answers {cmdId, output, exitCode}.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Command == "" {
		tbError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	async := in.RunAsync || in.Async
	var p *proc
	var out *strings.Builder
	s.started(w, r, func(b *box) {
		se := b.sessions[r.PathValue("session")]
		if se == nil {
			tbError(w, r, http.StatusNotFound, "session not found")
			return
		}
		if !async {
			out = &strings.Builder{}
		}
		var err error
		if p, err = s.command(b, in.Command, out); err != nil {
			tbError(w, r, http.StatusInternalServerError, err.Error())
			return
		}
		se.procs = append(se.procs, p)
		se.commands = append(se.commands, in.Command)
	})
	if p == nil {
		return
	}
	id := randomID()
	if async {
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": id})
		return
	}
	<-p.done
	writeJSON(w, http.StatusOK, map[string]any{"cmdId": id, "output": out.String(), "exitCode": p.cmd.ProcessState.ExitCode()})
}
