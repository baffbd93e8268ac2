// FAKE — not Daytona. The toolbox half of the in-repo stand-in for the
// Daytona REST API: project dir, file upload and process sessions, backed
// by real local directories and processes. Also the file listing and
// download used to export a workspace.

package fake

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a command a session started, in its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// stop sends SIGTERM to the group and SIGKILL after 10s.
func (p *proc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// started runs fn on a started sandbox's box; toolbox calls on any other
// sandbox fail as Daytona's do.
func (s *Server) started(w http.ResponseWriter, r *http.Request, fn func(b *box)) {
	s.withBox(w, r, func(b *box) {
		if b.sb.State != StateStarted {
			apiError(w, http.StatusBadRequest, "Sandbox is not running (state "+b.sb.State+")")
			return
		}
		fn(b)
	})
}

func (s *Server) projectDir(w http.ResponseWriter, r *http.Request) {
	s.started(w, r, func(b *box) { writeJSON(w, map[string]string{"dir": b.dir}) })
}

// inside maps a sandbox path (absolute, as the sandbox sees it: the fake's
// directories are the same paths on both sides) to a path under the box's
// directory, or "" if it escapes it.
func inside(b *box, p string) string {
	clean := filepath.Clean(p)
	if !filepath.IsAbs(clean) {
		clean = filepath.Join(b.dir, clean)
	}
	if clean != b.dir && !strings.HasPrefix(clean, b.dir+string(filepath.Separator)) {
		return ""
	}
	return clean
}

// upload is POST files/upload?path=, multipart field "file". The file is
// written to a temp name and renamed, so a running binary can be replaced;
// with FailUploadAfter, the partial temp file is left behind under the
// final name's directory and the call fails.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	var dst string
	var limit int64
	s.started(w, r, func(b *box) {
		dst = inside(b, r.URL.Query().Get("path"))
		limit = s.failUploadAfter
		if dst == "" {
			apiError(w, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
		}
	})
	if dst == "" {
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		apiError(w, http.StatusBadRequest, "file: "+err.Error())
		return
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	tmp := dst + ".upload"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var src io.Reader = f
	if limit >= 0 {
		src = io.LimitReader(f, limit)
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit >= 0 {
		apiError(w, http.StatusInternalServerError, "fake: upload failed midway (FailUploadAfter)")
		return
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// fileInfo is the documented toolbox FileInfo.
type fileInfo struct {
	Name        string `json:"name"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	ModTime     string `json:"modTime"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
}

// listFiles is GET files?path=: one directory's entries, not recursive.
// Knobs: MisreportSize, ListHostile.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	var dir string
	var delta map[string]int64
	var hostile []string
	s.started(w, r, func(b *box) {
		dir = inside(b, r.URL.Query().Get("path"))
		delta = maps.Clone(s.sizeDelta)
		hostile = slices.Clone(s.hostileEntries)
		if dir == "" {
			apiError(w, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
		}
	})
	if dir == "" {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		status := http.StatusInternalServerError
		if os.IsNotExist(err) {
			status = http.StatusNotFound
		}
		apiError(w, status, err.Error())
		return
	}
	out := []fileInfo{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, fileInfo{Name: e.Name(), IsDir: fi.IsDir(), Size: fi.Size() + delta[e.Name()],
			ModTime: fi.ModTime().UTC().Format(time.RFC3339Nano), Mode: fi.Mode().String(),
			Permissions: "0" + strconv.FormatUint(uint64(fi.Mode().Perm()), 8), Owner: "daytona", Group: "daytona"})
	}
	for _, h := range hostile {
		out = append(out, fileInfo{Name: h, Size: 5, ModTime: time.Now().UTC().Format(time.RFC3339Nano),
			Mode: "-rw-r--r--", Permissions: "0644", Owner: "daytona", Group: "daytona"})
	}
	writeJSON(w, out)
}

// download is GET files/download?path=: the file's bytes. With
// FailDownloadAfter it announces the full length, sends that many bytes
// and breaks the connection.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	var file string
	limit := int64(-1)
	s.started(w, r, func(b *box) {
		file = inside(b, r.URL.Query().Get("path"))
		limit = s.failDownloadAfter
		if file == "" {
			apiError(w, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
		}
	})
	if file == "" {
		return
	}
	f, err := os.Open(file)
	if err != nil {
		status := http.StatusInternalServerError
		if os.IsNotExist(err) {
			status = http.StatusNotFound
		}
		apiError(w, status, err.Error())
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		apiError(w, http.StatusBadRequest, "not a file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if limit < 0 || limit >= fi.Size() {
		_, _ = io.Copy(w, f)
		return
	}
	_, _ = io.Copy(w, io.LimitReader(f, limit))
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	panic(http.ErrAbortHandler) // the stream breaks
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SessionID == "" {
		apiError(w, http.StatusBadRequest, "sessionId is required")
		return
	}
	s.started(w, r, func(b *box) {
		if b.sessions[in.SessionID] {
			apiError(w, http.StatusConflict, "session already exists")
			return
		}
		b.sessions[in.SessionID] = true
		w.WriteHeader(http.StatusOK)
	})
}

// exec is POST process/session/{sessionId}/exec {command, runAsync}. The
// command runs with sh -c in the sandbox's directory, in a process group
// of its own, with a minimal environment (as a fresh sandbox shell has).
// With runAsync the answer is {cmdId} at once; otherwise the fake waits and
// answers {cmdId, output, exitCode}.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Command == "" {
		apiError(w, http.StatusBadRequest, "command is required")
		return
	}
	var p *proc
	var out *strings.Builder
	s.started(w, r, func(b *box) {
		if !b.sessions[r.PathValue("session")] {
			apiError(w, http.StatusNotFound, "session not found")
			return
		}
		cmd := exec.Command("/bin/sh", "-c", in.Command)
		cmd.Dir = b.dir
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + b.dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out = &strings.Builder{}
		if !(in.RunAsync || in.Async) {
			cmd.Stdout, cmd.Stderr = out, out
		}
		if err := cmd.Start(); err != nil {
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		p = &proc{cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(p.done) }()
		b.procs = append(b.procs, p)
	})
	if p == nil {
		return
	}
	id := randomID()
	if in.RunAsync || in.Async {
		writeJSON(w, map[string]any{"cmdId": id})
		return
	}
	<-p.done
	writeJSON(w, map[string]any{"cmdId": id, "output": out.String(), "exitCode": p.cmd.ProcessState.ExitCode()})
}
