package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/protocol"
)

// The runner socket: besides its TCP listener the controller serves the runner endpoint, and
// nothing else, on a unix socket in its data dir, DATA/run/runner.sock. A provider whose sandbox
// has no route to the controller's address (the Docker provider's private networks) bind-mounts
// the socket's directory into the sandbox and points its runner there, so a controller started
// plainly on 127.0.0.1 still gets those runners connected. Whoever reaches the socket can offer
// a runner token and nothing more: the REST API is not on it. The directory is 0711 (others may
// pass through it, not list it) and the socket 0666 (connect needs write permission), so a
// runner of any uid in the sandbox can connect; keeping the agent away from it is the
// provider's part (the Docker provider mounts it below a directory only the runner can enter).
// The directory is never removed, only the socket: a sandbox's bind mount of it stays valid
// across controller restarts.
const (
	runnerSocketDir  = "run"
	runnerSocketName = "runner.sock"
)

// runnerSocket is the controller's listening runner socket.
type runnerSocket struct {
	net.Listener
	path  string // the socket's host path, as providers are told
	dirFD int    // the socket's directory, held so the socket is named through it
	dev   uint64 // the socket file this controller made, removed on close if still there
	ino   uint64
}

// listenRunnerSocket makes DATA/run (0711) and listens on DATA/run/runner.sock (0666). A socket
// left there by a controller that is gone is replaced; one that still answers is refused.
func listenRunnerSocket(dataDir string) (*runnerSocket, error) {
	dir := filepath.Join(dataDir, runnerSocketDir)
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s belongs to uid %d, not to the controller", dir, st.Uid)
	}
	if err := unix.Fchmod(fd, 0o711); err != nil {
		return nil, err
	}
	// Named through the directory's descriptor: a data dir's path may be longer than a socket
	// address holds (108 bytes).
	name := fmt.Sprintf("/proc/self/fd/%d/%s", fd, runnerSocketName)
	if err := unix.Fstatat(fd, runnerSocketName, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("%s exists and is not a socket", filepath.Join(dir, runnerSocketName))
		}
		if c, err := net.DialTimeout("unix", name, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another controller serves %s", filepath.Join(dir, runnerSocketName))
		}
		if err := unix.Unlinkat(fd, runnerSocketName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, err
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	if err := unix.Fchmodat(fd, runnerSocketName, 0o666, 0); err != nil {
		l.Close()
		_ = unix.Unlinkat(fd, runnerSocketName, 0)
		return nil, err
	}
	if err := unix.Fstatat(fd, runnerSocketName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		l.Close()
		return nil, err
	}
	ok = true
	return &runnerSocket{Listener: l, path: filepath.Join(dir, runnerSocketName), dirFD: fd,
		dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// Close stops listening and removes the socket file if it is still the one this controller made.
func (r *runnerSocket) Close() error {
	err := r.Listener.Close()
	var st unix.Stat_t
	if unix.Fstatat(r.dirFD, runnerSocketName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		uint64(st.Dev) == r.dev && uint64(st.Ino) == r.ino {
		_ = unix.Unlinkat(r.dirFD, runnerSocketName, 0)
	}
	unix.Close(r.dirFD)
	return err
}

// runnerHandler serves what the runner socket carries: the runner endpoint, nothing else.
func (s *Server) runnerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.ConnectPath, s.handleRunnerConnect)
	return mux
}

// serveRunnerSocket listens on the runner socket and serves it, as the routine "runner socket",
// until the controller shuts down. Without a socket (a data dir on a filesystem without them,
// another controller on it) the controller still serves runners over TCP; providers are then
// told of no socket.
func (s *Server) serveRunnerSocket() {
	rs, err := listenRunnerSocket(s.cfg.DataDir)
	if err != nil {
		s.log.Warn("no runner socket: sandboxes must reach the controller's address", "err", err)
		return
	}
	srv := s.cfg.HTTP.server(s.runnerHandler(), s.ctx)
	l := s.cfg.HTTP.limitListener(rs)
	if !s.routines.Go("runner socket", func(ctx context.Context) { _ = serveHTTP(ctx, srv, l) }) {
		rs.Close()
		return
	}
	s.runnerSocket = rs.path
	s.log.Info("runner socket listening", "path", rs.path)
}
