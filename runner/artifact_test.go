package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// fakeArtifact is one artifact as the fake controller serves it.
type fakeArtifact struct {
	info       protocol.ArtifactInfo
	body       []byte // what is actually sent (may differ from info: a tampered store)
	reply      error  // refuse the fetch with this error
	abortAfter int    // >0: abort the body with abortErr after this many bytes
	abortErr   error
}

// fakeController accepts the runner's streams and answers artifact_fetch from a map. Authority
// checks are the real controller's job; here only the runner's install semantics are tested.
type fakeController struct {
	mu       sync.Mutex
	arts     map[string]fakeArtifact
	fetches  int
	installs []protocol.ArtifactInstall
	// installed receives each install as it is recorded (sends that find it full are dropped).
	installed chan protocol.ArtifactInstall
}

func (f *fakeController) add(id string, body []byte) fakeArtifact {
	sum := sha256.Sum256(body)
	a := fakeArtifact{info: protocol.ArtifactInfo{ID: id, Bytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Untrusted: true}, body: body}
	f.set(id, a)
	return a
}

func (f *fakeController) set(id string, a fakeArtifact) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arts[id] = a
}

func (f *fakeController) serve(sess *yamux.Session) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go f.handle(st)
	}
}

func (f *fakeController) handle(st *yamux.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	var h protocol.Header
	if protocol.ReadJSON(st, &h) != nil {
		return
	}
	switch h.Op {
	case protocol.OpArtifactFetch:
		var args protocol.ArtifactFetchArgs
		_ = json.Unmarshal(h.Args, &args)
		f.mu.Lock()
		a, ok := f.arts[args.ArtifactID]
		f.fetches++
		f.mu.Unlock()
		switch {
		case !ok:
			writeTrailer(st, nil, protocol.Errorf(protocol.CodeNotFound, "no artifact %s", args.ArtifactID))
			return
		case a.reply != nil:
			writeTrailer(st, nil, a.reply)
			return
		}
		writeTrailer(st, a.info, nil)
		bw := protocol.NewBodyWriter(st)
		if a.abortAfter > 0 {
			_, _ = bw.Write(a.body[:a.abortAfter])
			_ = bw.Abort(a.abortErr)
			return
		}
		if _, err := bw.Write(a.body); err != nil {
			return
		}
		if _, err := bw.Finish(); err != nil {
			return
		}
		writeTrailer(st, nil, nil)
	case protocol.OpArtifactInstalled:
		var in protocol.ArtifactInstall
		_ = json.Unmarshal(h.Args, &in)
		f.mu.Lock()
		f.installs = append(f.installs, in)
		f.mu.Unlock()
		select {
		case f.installed <- in:
		default:
		}
		writeTrailer(st, nil, nil)
	default:
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeUnsupported, "%s", h.Op))
	}
}

// artifactRunner is a runner connected in memory to a fake controller.
func artifactRunner(t *testing.T) (*Runner, *fakeController) {
	t.Helper()
	r, runnerSide, ctlSide := memRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = r.serve(ctx, runnerSide) }()
	r.setSession(runnerSide)
	f := &fakeController{arts: map[string]fakeArtifact{}, installed: make(chan protocol.ArtifactInstall, 16)}
	go f.serve(ctlSide)
	t.Cleanup(cancel)
	return r, f
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	if err == nil || protocol.CodeOf(err) != code {
		t.Fatalf("got error %v; want code %s", err, code)
	}
}

// noLeftovers fails if dir (below the root) holds a temporary file.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fsguard.TempPrefix) {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestArtifactInstallAndReplay(t *testing.T) {
	r, f := artifactRunner(t)
	body := bytes.Repeat([]byte("synthetic api response\n"), 50000) // > 1 MiB: several chunks
	a := f.add("art_1", body)
	ctx := context.Background()
	in, err := r.installArtifact(ctx, "art_1", "inbox/resp.json")
	if err != nil {
		t.Fatal(err)
	}
	if in.Replayed || !in.Untrusted || in.Path != "inbox/resp.json" || in.Bytes != a.info.Bytes || in.SHA256 != a.info.SHA256 {
		t.Fatalf("install: %+v", in)
	}
	p := filepath.Join(r.cfg.Root, "inbox", "resp.json")
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("installed content differs (%v)", err)
	}
	buf := make([]byte, 8)
	switch n, err := unix.Getxattr(p, XattrUntrusted, buf); err {
	case nil:
		if string(buf[:n]) != "1" {
			t.Fatalf("xattr %s = %q", XattrUntrusted, buf[:n])
		}
	case unix.ENOTSUP:
		t.Logf("filesystem without user xattrs: label not checked")
	default:
		t.Fatalf("xattr: %v", err)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(p, &before); err != nil {
		t.Fatal(err)
	}

	// The identical request again changes nothing.
	in2, err := r.installArtifact(ctx, "art_1", "inbox/resp.json")
	if err != nil || !in2.Replayed || in2.SHA256 != a.info.SHA256 {
		t.Fatalf("replay: %+v, %v", in2, err)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(p, &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino != after.Ino || before.Mtim != after.Mtim {
		t.Fatal("a replay rewrote the file")
	}
	noLeftovers(t, filepath.Join(r.cfg.Root, "inbox"))

	// The controller heard of both installs.
	for n := range 2 {
		select {
		case <-f.installed:
		case <-time.After(5 * time.Second):
			t.Fatalf("controller recorded %d installs; want 2", n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.installs) != 2 || f.installs[1].ArtifactID != "art_1" || !f.installs[1].Replayed || f.installs[0].Replayed {
		t.Fatalf("recorded installs: %+v", f.installs)
	}
}

func TestArtifactRefusals(t *testing.T) {
	r, f := artifactRunner(t)
	ctx := context.Background()
	root := r.cfg.Root
	f.add("art_a", []byte("exact bytes"))

	// Other content at the destination: conflict, and it stays.
	if err := os.WriteFile(filepath.Join(root, "taken"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.installArtifact(ctx, "art_a", "taken")
	wantCode(t, err, protocol.CodeConflict)
	if b, _ := os.ReadFile(filepath.Join(root, "taken")); string(b) != "mine" {
		t.Fatal("conflict changed the file")
	}
	// Same size, other bytes: still a conflict.
	if err := os.WriteFile(filepath.Join(root, "same-size"), []byte("EXACT BYTES"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.installArtifact(ctx, "art_a", "same-size")
	wantCode(t, err, protocol.CodeConflict)
	// A directory there is a conflict too.
	if err := os.Mkdir(filepath.Join(root, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = r.installArtifact(ctx, "art_a", "adir")
	wantCode(t, err, protocol.CodeConflict)

	// Symlinks: as a parent and as the destination itself.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = r.installArtifact(ctx, "art_a", "link/x")
	wantCode(t, err, protocol.CodeSymlinkRefused)
	_, err = r.installArtifact(ctx, "art_a", "link/deeper/x")
	wantCode(t, err, protocol.CodeSymlinkRefused)
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(root, "dest-link")); err != nil {
		t.Fatal(err)
	}
	_, err = r.installArtifact(ctx, "art_a", "dest-link")
	wantCode(t, err, protocol.CodeSymlinkRefused)
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("something was written outside the root: %v", entries)
	}

	// Outside the root, and not a file name at all.
	_, err = r.installArtifact(ctx, "art_a", "../x")
	wantCode(t, err, protocol.CodePathEscape)
	_, err = r.installArtifact(ctx, "art_a", "/etc/x")
	if c := protocol.CodeOf(err); c != protocol.CodePathEscape && c != protocol.CodeInvalidPath {
		t.Fatalf("absolute path: %v", err)
	}
	_, err = r.installArtifact(ctx, "art_a", ".")
	wantCode(t, err, protocol.CodeInvalidPath)

	// The controller's refusals come through with their codes, and nothing is created.
	f.set("art_foreign", fakeArtifact{reply: protocol.Errorf(protocol.CodeNotFound, "no such artifact is available to this workspace")})
	_, err = r.installArtifact(ctx, "art_foreign", "new/dir/x")
	wantCode(t, err, protocol.CodeNotFound)
	_, err = r.installArtifact(ctx, "art_missing", "new/dir/x")
	wantCode(t, err, protocol.CodeNotFound)
	f.set("art_stale", fakeArtifact{reply: protocol.Errorf(protocol.CodeStaleEpoch, "old writer")})
	_, err = r.installArtifact(ctx, "art_stale", "new/dir/x")
	wantCode(t, err, protocol.CodeStaleEpoch)
	if _, err := os.Lstat(filepath.Join(root, "new")); err == nil {
		t.Fatal("a refused install created directories")
	}

	// No connection to the controller.
	r.setSession(nil)
	_, err = r.installArtifact(ctx, "art_a", "later")
	wantCode(t, err, protocol.CodeUnavailable)
	noLeftovers(t, root)
}

// A revocation mid-transfer, and bytes that do not match the record, publish nothing and leave
// no temporary file.
func TestArtifactAbortedAndTampered(t *testing.T) {
	r, f := artifactRunner(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte{0xab}, 3<<20)
	a := f.add("art_big", big)
	a.abortAfter = 2 << 20
	a.abortErr = protocol.Errorf(protocol.CodeRevoked, "artifact art_big was revoked")
	f.set("art_big", a)
	_, err := r.installArtifact(ctx, "art_big", "d/big.bin")
	wantCode(t, err, protocol.CodeRevoked)
	if _, err := os.Lstat(filepath.Join(r.cfg.Root, "d", "big.bin")); err == nil {
		t.Fatal("a revoked transfer was published")
	}
	// The refused install leaves the workspace as it was: not even the directory it made.
	if _, err := os.Lstat(filepath.Join(r.cfg.Root, "d")); err == nil {
		t.Fatal("a refused install left the directory it created")
	}

	t2 := f.add("art_tampered", []byte("what the record says"))
	t2.body = []byte("what the store holds!")
	f.set("art_tampered", t2)
	_, err = r.installArtifact(ctx, "art_tampered", "d/t.txt")
	wantCode(t, err, protocol.CodeDigestMismatch)
	// Same length, other bytes.
	t3 := f.add("art_tampered2", []byte("aaaa"))
	t3.body = []byte("bbbb")
	f.set("art_tampered2", t3)
	_, err = r.installArtifact(ctx, "art_tampered2", "d/t.txt")
	wantCode(t, err, protocol.CodeDigestMismatch)
	if _, err := os.Lstat(filepath.Join(r.cfg.Root, "d")); err == nil {
		t.Fatal("tampered bytes, or the directory made for them, were left behind")
	}
}

// Two identical downloads at once: both succeed, exactly one writes.
func TestArtifactConcurrentIdentical(t *testing.T) {
	r, f := artifactRunner(t)
	f.add("art_c", bytes.Repeat([]byte("c"), 600<<10))
	for round := 0; round < 5; round++ {
		dest := filepath.Join("c", string(rune('a'+round)))
		var wg sync.WaitGroup
		res := make([]protocol.ArtifactInstall, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = r.installArtifact(context.Background(), "art_c", dest)
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("concurrent installs: %v, %v", errs[0], errs[1])
		}
		if res[0].Replayed == res[1].Replayed {
			t.Fatalf("want exactly one write and one replay: %+v / %+v", res[0], res[1])
		}
	}
	noLeftovers(t, filepath.Join(r.cfg.Root, "c"))
}

// The agent-side tool, through the real socket: `tether-runner artifact download`.
func TestArtifactCommandOverAgentSocket(t *testing.T) {
	r, f := artifactRunner(t)
	a := f.add("art_cli", []byte(`{"status":"ok"}`))
	f.set("art_other", fakeArtifact{reply: protocol.Errorf(protocol.CodeNotFound, "no such artifact is available to this workspace")})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock, stop, err := r.startAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode: %v, %v", fi.Mode(), err)
	}
	if strings.HasPrefix(sock, r.cfg.Root) {
		t.Fatal("agent socket inside the workspace")
	}
	getenv := func(k string) string {
		if k == protocol.EnvSocket {
			return sock
		}
		return ""
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := ArtifactCommand(ctx, args, getenv, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := run("download", "art_cli", "data/resp.json", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if res["artifact_id"] != "art_cli" || res["path"] != "data/resp.json" || res["bytes"] != float64(a.info.Bytes) ||
		res["sha256"] != a.info.SHA256 || res["untrusted"] != true || res["replayed"] != false {
		t.Fatalf("output: %v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(r.cfg.Root, "data", "resp.json")); string(b) != `{"status":"ok"}` {
		t.Fatalf("installed: %q", b)
	}
	code, out, _ = run("download", "art_cli", "data/resp.json")
	if code != 0 || !strings.Contains(out, "replayed") || !strings.Contains(out, a.info.SHA256) {
		t.Fatalf("replay: exit %d, %q", code, out)
	}

	code, _, errOut = run("download", "art_other", "data/other.json", "--json")
	if code != protocol.CodeNotFound.ExitCode() || errOut != "error: not_found: no such artifact is available to this workspace\n" {
		t.Fatalf("foreign: exit %d, %q", code, errOut)
	}
	code, _, errOut = run("download", "art_cli", "../escape")
	if code != protocol.CodePathEscape.ExitCode() || !strings.HasPrefix(errOut, "error: path_escape: ") {
		t.Fatalf("escape: exit %d, %q", code, errOut)
	}
	if code, _, _ = run("download", "art_cli"); code != 2 {
		t.Fatalf("usage error: exit %d", code)
	}
	// Outside an allocation there is no socket.
	var stderr bytes.Buffer
	code = ArtifactCommand(ctx, []string{"download", "art_cli", "x"}, func(string) string { return "" }, &bytes.Buffer{}, &stderr)
	if code != protocol.CodeUnavailable.ExitCode() {
		t.Fatalf("no socket: exit %d, %q", code, stderr.String())
	}

	// Stopping removes the socket and its directory.
	stop()
	if _, err := os.Stat(filepath.Dir(sock)); err == nil {
		t.Fatal("agent socket directory left behind")
	}
}

func TestSetEnv(t *testing.T) {
	env := setEnv([]string{"A=1", protocol.EnvSocket + "=/old", "B=2"}, protocol.EnvSocket, "/new")
	if strings.Join(env, " ") != "A=1 B=2 "+protocol.EnvSocket+"=/new" {
		t.Fatalf("env: %v", env)
	}
}
