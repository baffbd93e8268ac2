// Command hostilerunner is a test-only stand-in for tether-runner that attacks the controller
// with a real session: it connects with the bootstrap token its provider gave it, says a proper
// hello, and then does what its plan says (flood streams, announce huge frames, send junk or
// lying captures). With no plan it execs the real runner, so one controller can serve hostile
// and honest workspaces side by side.
//
// The plan is read at start from the file named at build time (-X main.planFile=PATH): one
// word, the attack for the next runner that starts. What the runner saw is appended as JSON lines
// to PATH.report.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Set at build time.
var (
	planFile   string
	realRunner string
)

func main() {
	plan, _ := os.ReadFile(planFile)
	mode := strings.TrimSpace(string(plan))
	if mode == "" || mode == "real" || len(os.Args) > 1 {
		// Probes and confinement inits carry arguments; they, and honest workspaces, get the
		// real runner.
		err := syscall.Exec(realRunner, append([]string{realRunner}, os.Args[1:]...), os.Environ())
		fmt.Fprintln(os.Stderr, "hostilerunner: exec real runner:", err)
		os.Exit(1)
	}
	_ = os.Remove(planFile) // the plan is for one runner
	h := &hostile{mode: mode, token: os.Getenv(protocol.EnvRunnerToken)}
	os.Unsetenv(protocol.EnvRunnerToken)
	err := h.run()
	h.report(map[string]any{"mode": mode, "fatal": err.Error()})
	os.Exit(1)
}

type hostile struct {
	mode  string
	token string
	epoch uint64
	mu    sync.Mutex

	floodOnce sync.Once
	usageOnce sync.Once
}

func (h *hostile) report(v map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(v)
	f, err := os.OpenFile(planFile+".report", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

// run connects and serves (and attacks) until the controller drops the connection, then
// reconnects with the session token it was given, as a real runner would. It returns only when
// it can no longer connect.
func (h *hostile) run() error {
	for attempt := 0; ; attempt++ {
		sess, err := h.connect()
		if err != nil {
			if attempt > 50 {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		h.report(map[string]any{"mode": h.mode, "event": "connected", "attempt": attempt})
		h.serve(sess)
		h.report(map[string]any{"mode": h.mode, "event": "disconnected", "attempt": attempt})
	}
}

func (h *hostile) connect() (*yamux.Session, error) {
	base := os.Getenv(protocol.EnvControllerURL)
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	d := &websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	target := ""
	switch u.Scheme {
	case "unix":
		sock := u.Path
		d.NetDialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		}
		target = "ws://controller" + protocol.ConnectPath
	default:
		u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
		u.Path = strings.TrimSuffix(u.Path, "/") + protocol.ConnectPath
		target = u.String()
	}
	ws, _, err := d.Dial(target, http.Header{"Authorization": {"Bearer " + h.token}})
	if err != nil {
		return nil, err
	}
	sess, err := protocol.MuxClient(protocol.NewWSConn(ws))
	if err != nil {
		return nil, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		return nil, err
	}
	defer st.Close()
	hello := protocol.Hello{ProtocolMin: protocol.ProtocolMin, ProtocolMax: protocol.ProtocolMax, RunnerVersion: "hostile",
		AllocationID: os.Getenv(protocol.EnvAllocationID), Capabilities: protocol.RunnerCapabilities(), PID: os.Getpid(),
		Root: os.Getenv(protocol.EnvWorkspaceRoot)}
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpHello}); err != nil {
		return nil, err
	}
	if err := protocol.WriteJSON(st, hello); err != nil {
		return nil, err
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		return nil, err
	}
	if err := tr.Err(); err != nil {
		return nil, err
	}
	var welcome protocol.Welcome
	if err := json.Unmarshal(tr.Result, &welcome); err != nil {
		return nil, err
	}
	h.token, h.epoch = welcome.SessionToken, welcome.Epoch
	sum := sha256.Sum256([]byte(welcome.SessionToken))
	if err := protocol.WriteJSON(st, protocol.WelcomeAck{SessionTokenSHA256: hex.EncodeToString(sum[:])}); err != nil {
		return nil, err
	}
	return sess, nil
}

// flood opens many streams at once. "flood": each announces a frame of the largest size and
// sends all but its last byte. "flood-after-header": each sends a small valid request, then
// keeps sending junk and never closes.
func (h *hostile) flood(sess *yamux.Session) {
	const streams = 150
	var answered, refused, reset atomic.Int64
	var wg sync.WaitGroup
	junk := make([]byte, protocol.MaxFrame-1)
	for range streams {
		st, err := sess.OpenStream()
		if err != nil {
			reset.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The answer may come while we still write: read it on the side.
			got := make(chan protocol.Trailer, 1)
			go func() {
				var tr protocol.Trailer
				if protocol.ReadJSON(st, &tr) == nil {
					got <- tr
				}
				close(got)
			}()
			if h.mode == "flood" {
				var n [4]byte
				binary.BigEndian.PutUint32(n[:], protocol.MaxFrame)
				_, _ = st.Write(n[:])
			} else {
				raw, _ := json.Marshal(protocol.RunStatus{RunID: "run_nobody", Finished: true})
				_ = protocol.WriteJSON(st, protocol.Header{Op: protocol.OpRunExited, Args: raw})
			}
			_ = st.SetWriteDeadline(time.Now().Add(20 * time.Second))
			_, _ = st.Write(junk)
			tr, ok := <-got
			switch {
			case ok:
				answered.Add(1)
				if tr.Error != nil {
					refused.Add(1)
				}
			default:
				reset.Add(1)
			}
		}()
	}
	wg.Wait()
	h.report(map[string]any{"mode": h.mode, "event": "flooded", "streams": streams,
		"answered": answered.Load(), "refused": refused.Load(), "reset": reset.Load()})
}

// usageGarbage sends usage reports no sandbox could have (wrong types, numbers past any bound,
// negative ones, not an object), then the same honest report six times in a row (a flood of
// reports), and reports the controller's answers.
func (h *hostile) usageGarbage(sess *yamux.Session) {
	call := func(args string) *protocol.Error {
		st, err := sess.OpenStream()
		if err != nil {
			return protocol.Errorf(protocol.CodeUnavailable, "%v", err)
		}
		defer st.Close()
		_ = st.SetDeadline(time.Now().Add(30 * time.Second))
		if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpUsageReport, Args: json.RawMessage(args)}); err != nil {
			return protocol.Errorf(protocol.CodeUnavailable, "%v", err)
		}
		var tr protocol.Trailer
		if err := protocol.ReadJSON(st, &tr); err != nil {
			return protocol.Errorf(protocol.CodeUnavailable, "%v", err)
		}
		return tr.Error
	}
	garbage := []string{
		`{"cpu_percent":"lots"}`,
		`{"cpu_percent":1e999}`,
		`{"cpu_percent":-5,"memory_bytes":1,"disk_bytes":1}`,
		`{"cpu_percent":1e12}`,
		`{"memory_bytes":-1}`,
		`{"disk_bytes":9223372036854775807}`,
		`[1,2,3]`,
	}
	refused := 0
	for _, g := range garbage {
		if e := call(g); e != nil && e.Code == protocol.CodeInvalidArgument {
			refused++
		}
	}
	accepted, soon := 0, 0
	for range 6 {
		switch e := call(`{"cpu_percent":42.5,"memory_bytes":12345,"disk_bytes":4096}`); {
		case e == nil:
			accepted++
		case e.Code == protocol.CodeInvalidArgument:
			soon++
		}
	}
	h.report(map[string]any{"mode": h.mode, "event": "usage", "garbage": len(garbage), "garbage_refused": refused,
		"accepted": accepted, "refused_too_soon": soon})
}

func (h *hostile) serve(sess *yamux.Session) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go h.handle(st)
	}
}

func (h *hostile) handle(st *yamux.Stream) {
	defer st.Close()
	var hdr protocol.Header
	if err := protocol.ReadJSON(st, &hdr); err != nil {
		return
	}
	switch hdr.Op {
	case protocol.OpFsStat:
		// The controller's probe at connect: once it is answered the workspace is ready, and a
		// flood starts (on the first connection only; the runner then just reconnects).
		_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`{"path":".","name":".","type":"dir","mode":493}`)})
		if h.mode == "flood" || h.mode == "flood-after-header" {
			h.floodOnce.Do(func() { go h.flood(st.Session()) })
		}
		if h.mode == "usage-garbage" {
			h.usageOnce.Do(func() { go h.usageGarbage(st.Session()) })
		}
	case protocol.OpSetEpoch:
		h.epoch = max(h.epoch, hdr.Epoch)
		_ = protocol.WriteJSON(st, protocol.Trailer{OK: true})
	case protocol.OpServiceList:
		_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`[]`)})
	case protocol.OpServiceStart:
		// Claims the service listens on the controller's own port, whatever port it was given.
		var spec protocol.ServiceSpec
		_ = json.Unmarshal(hdr.Args, &spec)
		port := 0
		if u, err := url.Parse(os.Getenv(protocol.EnvControllerURL)); err == nil {
			port, _ = strconv.Atoi(u.Port())
		}
		now := time.Now().UTC()
		raw, _ := json.Marshal(protocol.ServiceStatus{Name: spec.Name, State: protocol.ServiceReady, PID: os.Getpid(),
			Port: port, StartedAt: now, ReadyAt: now, Spec: spec})
		_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: raw})
		h.report(map[string]any{"mode": h.mode, "event": "spoofed", "given": spec.Port, "claimed": port})
	case protocol.OpSnapshotCapture:
		var args protocol.SnapshotCaptureArgs
		_ = json.Unmarshal(hdr.Args, &args)
		h.capture(st, args)
	case protocol.OpExec:
		// Starts nothing; says it started, as a detached run's stream ends.
		var args protocol.ExecArgs
		_ = json.Unmarshal(hdr.Args, &args)
		_ = protocol.NewChannelWriter(st).WriteJSONFrame(protocol.ChanStarted, protocol.ExecStarted{PID: os.Getpid(), RunID: args.RunID})
	case protocol.OpRunLogs:
		// lying-run-log: six bytes, then a gap that goes back into them (a reader that took it
		// would resume at byte 2 and print bytes 2–5 twice), then an end.
		cw := protocol.NewChannelWriter(st)
		_ = cw.WriteFrame(protocol.ChanStdout, []byte("hello\n"))
		_ = cw.WriteJSONFrame(protocol.ChanGap, protocol.LogGap{Stream: protocol.StreamStdout, From: 2, To: 4})
		_ = cw.WriteFrame(protocol.ChanStdout, []byte("llo\n"))
		_ = cw.WriteJSONFrame(protocol.ChanLogEnd, protocol.LogEnd{StdoutOffset: 8})
		h.report(map[string]any{"mode": h.mode, "event": "lied about a run log"})
	case protocol.OpTreeExport:
		var args protocol.TreeExportArgs
		_ = json.Unmarshal(hdr.Args, &args)
		h.export(st, args)
	default:
		_ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnsupported, "hostile runner: %s", hdr.Op)})
	}
}

// export answers a tree export with a tar that attacks the host it is extracted on; the
// path asked for picks the attack: "dotdot" (a name climbing out of the destination), "beside"
// (an entry next to the destination), "symlink" (a link to / and a file written through it),
// "lie" (an honest tar whose final counts lie).
func (h *hostile) export(st *yamux.Stream, args protocol.TreeExportArgs) {
	_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`{"path":"x","name":"x","type":"dir","mode":493}`)})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	top := args.Name
	add := func(name string, typ byte, link, body string) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: typ, Linkname: link, Mode: 0o755, Size: int64(len(body)), Format: tar.FormatPAX})
		_, _ = tw.Write([]byte(body))
	}
	add(top+"/", tar.TypeDir, "", "")
	add(top+"/a.txt", tar.TypeReg, "", "hello\n")
	switch args.Path {
	case "dotdot":
		add(top+"/../../escaped", tar.TypeReg, "", "pwned\n")
	case "beside":
		add(".bashrc", tar.TypeReg, "", "pwned\n")
	case "symlink":
		add(top+"/l", tar.TypeSymlink, "/tmp", "")
		add(top+"/l/escaped", tar.TypeReg, "", "pwned\n")
	}
	_ = tw.Close()
	body := protocol.NewBodyWriter(st)
	_, _ = body.Write(buf.Bytes())
	if _, err := body.Finish(); err != nil {
		return
	}
	counts := `{"files":2,"dirs":1,"symlinks":1,"bytes":12}` // what the symlink attack's tar holds
	if args.Path == "lie" {
		counts = `{"files":99,"dirs":1,"symlinks":0,"bytes":6}`
	}
	_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(counts)})
	h.report(map[string]any{"mode": h.mode, "event": "hostile export", "path": args.Path})
}

// capture answers a capture with what the plan says.
func (h *hostile) capture(st *yamux.Stream, args protocol.SnapshotCaptureArgs) {
	_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`{}`)})
	body := protocol.NewBodyWriter(st)
	files := map[string][]byte{"a.txt": []byte("hello\n"), "z.txt": []byte("world\n")}
	m := manifestFor(args, files)
	var archive []byte
	switch h.mode {
	case "silent-capture":
		// Says the body follows, then sends nothing.
		<-make(chan struct{})
	case "junk-capture":
		junk := make([]byte, 32<<20)
		_, _ = rand.Read(junk)
		archive = junk
	case "oversize-capture":
		// A well-formed archive that never ends: incompressible files, one after another, until
		// the controller stops taking them.
		enc, _ := zstd.NewWriter(body)
		tw := tar.NewWriter(enc)
		data := make([]byte, 1<<20)
		for i := 0; ; i++ {
			_, _ = rand.Read(data)
			if tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%08d", i), Typeflag: tar.TypeReg, Mode: 0o644,
				Size: int64(len(data)), ModTime: m.CreatedAt, Format: tar.FormatPAX}) != nil {
				return
			}
			if _, err := tw.Write(data); err != nil {
				return
			}
			if enc.Flush() != nil {
				return
			}
		}
	case "lying-manifest":
		// The manifest claims other content for a.txt than the archive holds.
		sum := sha256.Sum256([]byte("something else\n"))
		m.Entries[0].SHA256 = hex.EncodeToString(sum[:])
		archive = buildArchive(files, m)
	case "foreign-manifest":
		m.WorkspaceID = "ws_someoneelse"
		archive = buildArchive(files, m)
	case "huge-manifest":
		// More entries than the controller allows, all of them real.
		big := map[string][]byte{}
		for i := range 5000 {
			big[fmt.Sprintf("f%05d", i)] = nil
		}
		archive = buildArchive(big, manifestFor(args, big))
	case "lying-summary":
		archive = buildArchive(files, m)
	case "ref-honest", "ref-unknown", "ref-in-full", "ref-with-entry":
		// Once there is a parent (or always, for ref-in-full), a.txt is sent as a ref: to its
		// real content (honest), to content the workspace never had (unknown), or with its
		// bytes in the archive as well (with-entry).
		if !args.Incremental && h.mode != "ref-in-full" {
			archive = buildArchive(files, m)
			break
		}
		sent := map[string][]byte{"z.txt": files["z.txt"]}
		if h.mode == "ref-unknown" {
			secret := []byte("secret\n")
			sum := sha256.Sum256(secret)
			m.Entries[0].SHA256, m.Entries[0].Size = hex.EncodeToString(sum[:]), int64(len(secret))
			m.Totals.Bytes += int64(len(secret)) - int64(len(files["a.txt"]))
		}
		if h.mode == "ref-with-entry" {
			sent = files
		}
		m.Entries[0].Ref = true
		archive = buildArchive(sent, m)
	default:
		archive = buildArchive(files, m)
	}
	if _, err := body.Write(archive); err != nil {
		return
	}
	if _, err := body.Finish(); err != nil {
		return
	}
	sum := summaryOf(m)
	if h.mode == "lying-summary" {
		sum.Entries, sum.Bytes = 1_000_000, 1<<40
	}
	raw, _ := json.Marshal(sum)
	_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: raw})
	h.report(map[string]any{"mode": h.mode, "event": "captured", "archive_bytes": len(archive)})
}

func manifestFor(args protocol.SnapshotCaptureArgs, files map[string][]byte) *snapshot.Manifest {
	m := &snapshot.Manifest{Version: snapshot.FormatVersion, WorkspaceID: args.WorkspaceID, Epoch: args.Epoch,
		Parent: args.Parent, ToolVersion: "hostile", CreatedAt: time.Unix(1700000000, 0).UTC(), Entries: []snapshot.Entry{}, Skipped: []snapshot.Skipped{}}
	for _, name := range sortedNames(files) {
		sum := sha256.Sum256(files[name])
		m.Entries = append(m.Entries, snapshot.Entry{Path: name, Type: snapshot.TypeFile, Mode: 0o644,
			Size: int64(len(files[name])), SHA256: hex.EncodeToString(sum[:]), MTime: m.CreatedAt})
		m.Totals.Entries++
		m.Totals.Files++
		m.Totals.Bytes += int64(len(files[name]))
	}
	return m
}

// buildArchive writes files and the manifest as Capture would: PAX tar in order, zstd.
func buildArchive(files map[string][]byte, m *snapshot.Manifest) []byte {
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(enc)
	for _, name := range sortedNames(files) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name])),
			ModTime: m.CreatedAt, Format: tar.FormatPAX})
		_, _ = tw.Write(files[name])
	}
	js, _ := json.Marshal(m)
	_ = tw.WriteHeader(&tar.Header{Name: snapshot.ManifestName, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(js)),
		ModTime: m.CreatedAt, Format: tar.FormatPAX})
	_, _ = tw.Write(js)
	_ = tw.Close()
	_ = enc.Close()
	return buf.Bytes()
}

func summaryOf(m *snapshot.Manifest) protocol.SnapshotSummary {
	raw, _ := json.Marshal(m)
	ms := sha256.Sum256(raw)
	tree, _ := snapshot.TreeDigest(m.Entries)
	return protocol.SnapshotSummary{Entries: m.Totals.Entries, Files: m.Totals.Files, Dirs: m.Totals.Dirs,
		Symlinks: m.Totals.Symlinks, Bytes: m.Totals.Bytes, Parent: m.Parent, Tool: m.ToolVersion,
		Manifest: hex.EncodeToString(ms[:]), Tree: tree}
}

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
