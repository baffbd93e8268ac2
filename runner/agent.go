package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/protocol"
	"golang.org/x/sys/unix"
)

// The agent socket is how tools inside the sandbox (`tether-runner artifact download`) ask the
// runner for things only it may do. It is a unix socket, mode 0600, in a private 0700 directory
// outside the workspace, so only the sandbox user reaches it; there is no network listener.
// Each connection carries one JSON line of protocol.AgentRequest and gets one JSON line of
// protocol.AgentResponse back.

// AgentOpArtifactDownload installs an artifact into the workspace.
const AgentOpArtifactDownload = "artifact_download"

// maxAgentRequest bounds one request line.
const maxAgentRequest = 64 << 10

// startAgent listens on a fresh agent socket and serves it until ctx ends. It returns the
// socket's path and a function that stops serving and removes the socket and its directory.
func (r *Runner) startAgent(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "tether-agent-")
	if err != nil {
		return "", nil, err
	}
	// A confined agent has a uid of its own: it may pass through the directory (0711) to the
	// socket, which is its alone, but cannot list or change the directory.
	dirMode := os.FileMode(0o700)
	if r.policy.Active() {
		dirMode = 0o711
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	ln.SetUnlinkOnClose(true)
	uid, gid := r.agentIDs()
	err = os.Chmod(sock, 0o600)
	if err == nil && uid != os.Getuid() {
		err = os.Lchown(sock, uid, gid)
	}
	if err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	// The socket's routines end with ctx or stop: the listener closes, so accept returns, and
	// each connection's request is bounded by its deadlines.
	g := routine.New(ctx, r.cfg.Logger)
	g.Go("agent socket closer", func(ctx context.Context) {
		<-ctx.Done()
		ln.Close()
	})
	g.Go("agent socket accept", func(ctx context.Context) {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				r.cfg.Logger.Warn("agent socket: accept", "err", err)
				time.Sleep(50 * time.Millisecond) // paces retries of a failing accept: real time
				continue
			}
			if !g.Go("agent request", func(ctx context.Context) { r.serveAgent(ctx, conn) }) {
				conn.Close()
			}
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			g.Stop()
			os.RemoveAll(dir)
		})
	}
	return sock, stop, nil
}

// serveAgent answers one request on conn.
func (r *Runner) serveAgent(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	resp := func(res protocol.AgentResponse) {
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_ = json.NewEncoder(conn).Encode(res)
	}
	fail := func(err error) { resp(protocol.AgentResponse{Error: protocol.AsError(err)}) }
	if err := r.checkPeer(conn); err != nil {
		fail(err)
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var req protocol.AgentRequest
	if err := json.NewDecoder(io.LimitReader(conn, maxAgentRequest)).Decode(&req); err != nil {
		fail(protocol.Errorf(protocol.CodeInvalidArgument, "agent request: %v", err))
		return
	}
	// An install runs to its end even if the client hangs up: it is idempotent, and a retry
	// then finds it done.
	switch req.Op {
	case AgentOpArtifactDownload:
		in, err := r.installArtifact(ctx, req.ArtifactID, req.Dest)
		if err != nil {
			fail(err)
			return
		}
		resp(protocol.AgentResponse{Install: &in})
	default:
		fail(protocol.Errorf(protocol.CodeUnsupported, "agent operation %q is not supported", req.Op))
	}
}

// checkPeer admits only processes of the agent's user (the runner's own when nothing is
// confined). The socket's owner and mode already say so; this holds even if they were loosened.
func (r *Runner) checkPeer(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return protocol.Errorf(protocol.CodeUnauthorized, "agent socket: peer credentials: %v", cerr)
	}
	if uid, _ := r.agentIDs(); int(cred.Uid) != uid {
		return protocol.Errorf(protocol.CodeUnauthorized, "agent socket: uid %d may not use this runner", cred.Uid)
	}
	return nil
}

// setEnv returns env with key set to value, replacing any earlier setting.
func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// AgentCall sends one request to the agent socket at sock and returns the response.
func AgentCall(ctx context.Context, sock string, req protocol.AgentRequest) (protocol.AgentResponse, error) {
	var res protocol.AgentResponse
	if sock == "" {
		return res, protocol.Errorf(protocol.CodeUnavailable, "%s is not set: not running inside a tether allocation", protocol.EnvSocket)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return res, protocol.Errorf(protocol.CodeUnavailable, "runner agent socket: %v", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return res, protocol.Errorf(protocol.CodeUnavailable, "runner agent socket: %v", err)
	}
	if err := json.NewDecoder(conn).Decode(&res); err != nil {
		if ctx.Err() != nil {
			return res, protocol.Errorf(protocol.CodeCanceled, "runner agent socket: %v", ctx.Err())
		}
		return res, protocol.Errorf(protocol.CodeUnavailable, "runner agent socket: no answer: %v", err)
	}
	return res, nil
}

// ArtifactCommand is `tether-runner artifact ...`, run inside a sandbox. It returns the exit
// status: 0, 2 for usage errors, else the error code's exit status.
func ArtifactCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: tether-runner artifact download ARTIFACT_ID DEST [--json]")
		return protocol.CodeInvalidArgument.ExitCode()
	}
	asJSON := false
	var pos []string
	for _, a := range args {
		switch {
		case a == "--json" || a == "-json":
			asJSON = true
		case a == "-h" || a == "--help":
			usage()
			return 0
		case strings.HasPrefix(a, "-") && a != "-":
			fmt.Fprintf(stderr, "error: invalid_argument: unknown flag %s\n", a)
			return usage()
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 3 || pos[0] != "download" {
		return usage()
	}
	res, err := AgentCall(ctx, getenv(protocol.EnvSocket), protocol.AgentRequest{Op: AgentOpArtifactDownload, ArtifactID: pos[1], Dest: pos[2]})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err == nil && res.Install == nil {
		err = protocol.Errorf(protocol.CodeInternal, "runner agent socket: empty answer")
	}
	if err != nil {
		e := protocol.AsError(err)
		fmt.Fprintf(stderr, "error: %s: %s\n", e.Code, e.Message)
		return e.Code.ExitCode()
	}
	in := res.Install
	if asJSON {
		out := struct {
			ArtifactID string `json:"artifact_id"`
			Path       string `json:"path"`
			Bytes      int64  `json:"bytes"`
			SHA256     string `json:"sha256"`
			Untrusted  bool   `json:"untrusted"`
			Replayed   bool   `json:"replayed"`
		}{in.ArtifactID, in.Path, in.Bytes, in.SHA256, true, in.Replayed}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return 0
	}
	verb := "installed"
	if in.Replayed {
		verb = "already installed (replayed)"
	}
	fmt.Fprintf(stdout, "%s %s %s: %d bytes, sha256 %s, untrusted\n", verb, in.ArtifactID, in.Path, in.Bytes, in.SHA256)
	return 0
}
