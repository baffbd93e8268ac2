// FAKE — not Daytona. The toolbox half of the in-repo stand-in for the
// Daytona REST API, served at the sandboxes' toolboxProxyUrl as
// {toolboxProxyUrl}/{sandboxId}/...: home dir, files (upload-v2, list,
// download, delete), process/execute and process sessions, backed by real
// local directories and processes.

package fake

import (
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

// proc is a command the toolbox started, in its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// term sends SIGTERM to the group and SIGKILL after grace.
func (p *proc) term(grace time.Duration) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (s *Server) toolboxRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /toolbox/{id}/user-home-dir", s.homeDir)
	mux.HandleFunc("GET /toolbox/{id}/work-dir", s.homeDir)
	mux.HandleFunc("POST /toolbox/{id}/files/upload-v2", s.upload)
	mux.HandleFunc("GET /toolbox/{id}/files", s.listFiles)
	mux.HandleFunc("DELETE /toolbox/{id}/files", s.deleteFile)
	mux.HandleFunc("GET /toolbox/{id}/files/download", s.download)
	mux.HandleFunc("POST /toolbox/{id}/process/execute", s.execute)
	mux.HandleFunc("GET /toolbox/{id}/process/session", s.sessions)
	mux.HandleFunc("POST /toolbox/{id}/process/session", s.createSession)
	mux.HandleFunc("DELETE /toolbox/{id}/process/session/{session}", s.deleteSession)
	mux.HandleFunc("POST /toolbox/{id}/process/session/{session}/exec", s.exec)
	return mux
}

// started runs fn on a started sandbox's box; toolbox calls on any other
// sandbox fail as Daytona's do.
func (s *Server) started(w http.ResponseWriter, r *http.Request, fn func(b *box)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[r.PathValue("id")]
	if b == nil {
		tbError(w, r, http.StatusNotFound, "sandbox "+r.PathValue("id")+" not found")
		return
	}
	b.step()
	if b.sb.State != StateStarted {
		tbError(w, r, http.StatusBadRequest, "Sandbox is not running (state "+b.sb.State+")")
		return
	}
	fn(b)
}

func (s *Server) homeDir(w http.ResponseWriter, r *http.Request) {
	s.started(w, r, func(b *box) { writeJSON(w, http.StatusOK, map[string]string{"dir": b.dir}) })
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

// upload is POST files/upload-v2?path=, multipart field "file" or a raw
// body. Like Daytona's, it writes the destination in place (open with
// truncate, then copy): a running binary cannot be replaced this way
// (ETXTBSY), and with FailUploadAfter the destination is left partial.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	var dst string
	var limit int64
	s.started(w, r, func(b *box) {
		dst = inside(b, r.URL.Query().Get("path"))
		limit = s.failUploadAfter
		if dst == "" {
			tbError(w, r, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
		}
	})
	if dst == "" {
		return
	}
	var src io.Reader = r.Body
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		f, _, err := r.FormFile("file")
		if err != nil {
			tbError(w, r, http.StatusBadRequest, "file: "+err.Error())
			return
		}
		defer f.Close()
		src = f
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		tbError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		tbError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	if limit >= 0 {
		src = io.LimitReader(src, limit)
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit >= 0 {
		tbError(w, r, http.StatusInternalServerError, "fake: upload failed midway (FailUploadAfter)")
		return
	}
	if err != nil {
		tbError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": filepath.Base(dst), "path": dst, "type": "file"})
}

// deleteFile is DELETE files?path=.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	var file string
	s.started(w, r, func(b *box) {
		file = inside(b, r.URL.Query().Get("path"))
		if file == "" || file == b.dir {
			tbError(w, r, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
			file = ""
		}
	})
	if file == "" {
		return
	}
	var err error
	if r.URL.Query().Get("recursive") == "true" {
		err = os.RemoveAll(file)
	} else {
		err = os.Remove(file)
	}
	switch {
	case os.IsNotExist(err):
		tbError(w, r, http.StatusNotFound, err.Error())
	case err != nil:
		tbError(w, r, http.StatusBadRequest, err.Error())
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// fileInfo is the documented toolbox FileInfo.
type fileInfo struct {
	Name        string `json:"name"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
	Path        string `json:"path"`
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
			tbError(w, r, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
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
		tbError(w, r, status, err.Error())
		return
	}
	out := []fileInfo{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, fileInfo{Name: e.Name(), IsDir: fi.IsDir(), Size: fi.Size() + delta[e.Name()],
			ModTime: fi.ModTime().String(), ModifiedAt: fi.ModTime().UTC().Format(time.RFC3339Nano), Path: filepath.Join(dir, e.Name()), Mode: fi.Mode().String(),
			Permissions: "0" + strconv.FormatUint(uint64(fi.Mode().Perm()), 8), Owner: "daytona", Group: "daytona"})
	}
	for _, h := range hostile {
		now := time.Now()
		out = append(out, fileInfo{Name: h, Size: 5, ModTime: now.String(), ModifiedAt: now.UTC().Format(time.RFC3339Nano),
			Mode: "-rw-r--r--", Permissions: "0644", Owner: "daytona", Group: "daytona"})
	}
	writeJSON(w, http.StatusOK, out)
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
			tbError(w, r, http.StatusBadRequest, "path outside the sandbox's home (fake limitation)")
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
		tbError(w, r, status, err.Error())
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		tbError(w, r, http.StatusBadRequest, "not a file")
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
