package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// readProbe is one read of the files API; its outcome is a comparable string: the answer,
// normalized to what a live tree and its saved copy must share, or the error code.
type readProbe struct{ op, path string }

func (p readProbe) String() string { return p.op + " " + p.path }

// normInfo keeps what a saved copy must report exactly as the live tree did. A directory's size
// is the filesystem's business, and the root is not archived.
func normInfo(fi protocol.FileInfo) string {
	if fi.Type == protocol.FileDir {
		fi.Size = 0
	}
	if fi.Path == "." {
		fi.Mode, fi.MTime = 0, time.Time{}
	}
	fi.ReadSource = protocol.ReadSource{}
	return fmt.Sprintf("%s|%s|%s|%o|%d|%s|%s", fi.Path, fi.Name, fi.Type, fi.Mode, fi.Size, fi.MTime.UTC().Format(time.RFC3339Nano), fi.LinkTarget)
}

// run performs the probe and returns its outcome and the source of every answer it got.
func (p readProbe) run(ctx context.Context, cl *client.Client, id string) (string, []protocol.ReadSource) {
	var srcs []protocol.ReadSource
	errOut := func(err error) string { return "error " + string(codeOf(err)) }
	switch p.op {
	case "ls":
		page, err := cl.ListFiles(ctx, id, p.path, "", 0)
		if err != nil {
			return errOut(err), nil
		}
		var out []string
		for _, e := range page.Entries {
			if e.Type == protocol.FileOther {
				continue // fifos, sockets, devices: listed live, never archived
			}
			out = append(out, normInfo(e))
		}
		return strings.Join(out, "\n") + "\nnext=" + page.Next, append(srcs, page.ReadSource)
	case "pages": // two entries a page, following the cursor
		var out []string
		cursor := ""
		for {
			page, err := cl.ListFiles(ctx, id, p.path, cursor, 2)
			if err != nil {
				return strings.Join(out, ";") + errOut(err), srcs
			}
			srcs = append(srcs, page.ReadSource)
			var names []string
			for _, e := range page.Entries {
				names = append(names, e.Name)
			}
			out = append(out, strings.Join(names, ",")+">"+page.Next)
			if page.Next == "" {
				return strings.Join(out, ";"), srcs
			}
			cursor = page.Next
		}
	case "stat":
		fi, err := cl.StatFile(ctx, id, p.path)
		if err != nil {
			return errOut(err), nil
		}
		return normInfo(fi), append(srcs, fi.ReadSource)
	case "get", "range":
		var buf bytes.Buffer
		o := client.ReadOptions{}
		if p.op == "range" {
			o = client.ReadOptions{Offset: 2, Length: 5}
		}
		res, err := cl.ReadFile(ctx, id, p.path, &buf, o)
		if err != nil {
			return errOut(err), nil
		}
		return fmt.Sprintf("%d/%d %s", res.Bytes, res.Size, sha256Hex(buf.Bytes())), append(srcs, res.ReadSource)
	}
	panic("unknown probe " + p.op)
}

// A closed workspace is read from its last receipt: listings, stats and contents are those of
// the live tree before the close, refusals included, and every answer says it is the saved
// copy. After a reopen, reads are live again, from the new allocation.
func TestSavedReadsAfterClose(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "saved")
	host := func(p string) string { return filepath.Join(ws.Root, filepath.FromSlash(p)) }
	big := randomBytes(t, 3<<20+17)
	mustWrite(t, host("top.txt"), []byte("top\n"), 0o644)
	mustWrite(t, host("empty"), nil, 0o644)
	mustWrite(t, host("d/file"), []byte("inside d\n"), 0o644)
	mustWrite(t, host("d/secret"), []byte("only mine\n"), 0o600)
	mustWrite(t, host("d/nested/deep.txt"), []byte("deep\n"), 0o755)
	mustWrite(t, host("d/nested/big.bin"), big, 0o644)
	mustWrite(t, host("d-sibling"), []byte("sorts after d, before d/ in byte order\n"), 0o644)
	if err := os.Mkdir(host("emptydir"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "file", host("d/link"))
	mustSymlink(t, "/etc/passwd", host("d/abs"))
	mustSymlink(t, "nested", host("d/dirlink"))
	giveToAgent(t, ws.Root)

	paths := []string{".", "top.txt", "empty", "emptydir", "d", "d/file", "d/secret", "d/nested", "d/nested/deep.txt",
		"d/nested/big.bin", "d-sibling", "d/link", "d/abs", "d/dirlink", "d/link/x", "d/dirlink/deep.txt", "d/file/x",
		"missing", "missing/x", "d/missing", "../x", "d/../top.txt", "/etc/passwd", "d//file", "d/", "./top.txt",
		".tether-manifest.json", "d/nested/.tether-manifest.json"}
	var probes []readProbe
	for _, p := range paths {
		for _, op := range []string{"ls", "stat", "get", "range"} {
			probes = append(probes, readProbe{op, p})
		}
	}
	probes = append(probes, readProbe{"pages", "."}, readProbe{"pages", "d"}, readProbe{"pages", "emptydir"})

	ctx := context.Background()
	cl := c.Client(t)
	live := map[readProbe]string{}
	for _, p := range probes {
		out, srcs := p.run(ctx, cl, ws.ID)
		live[p] = out
		for _, src := range srcs {
			if src.Source != protocol.SourceLive || src.AllocationID != ws.AllocationID || src.SnapshotID != "" || src.SavedAt != nil {
				t.Fatalf("%s of the live workspace: source %+v", p, src)
			}
		}
	}
	// The probes mean something: contents, links and refusals are all among them.
	for p, want := range map[readProbe]string{
		{"get", "d/nested/big.bin"}:   fmt.Sprintf("%d/%d %s", len(big), len(big), sha256Hex(big)),
		{"stat", "d/link"}:            "d/link|link|symlink|777|4|",
		{"get", "d/link"}:             "error symlink_refused",
		{"ls", "d/dirlink"}:           "error symlink_refused",
		{"get", "d/dirlink/deep.txt"}: "error symlink_refused",
		{"get", "../x"}:               "error path_escape",
		{"stat", "missing"}:           "error not_found",
	} {
		if !strings.HasPrefix(live[p], want) {
			t.Fatalf("live %s: %q, want %q...", p, live[p], want)
		}
	}

	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "saved", "--json")), &closed); err != nil {
		t.Fatal(err)
	}
	if closed.Snapshot == nil || closed.Saved != closed.Snapshot.ID {
		t.Fatalf("close: %+v", closed)
	}
	snap := *closed.Snapshot
	for _, p := range probes {
		out, srcs := p.run(ctx, cl, ws.ID)
		if out != live[p] {
			t.Errorf("%s: saved copy answers\n%s\nthe live tree answered\n%s", p, out, live[p])
		}
		for _, src := range srcs {
			if src.Source != protocol.SourceSaved || src.SnapshotID != snap.ID || src.AllocationID != "" || src.SavedAt == nil || !src.SavedAt.Equal(snap.CreatedAt) {
				t.Fatalf("%s of the closed workspace: source %+v, want saved %s at %s", p, src, snap.ID, snap.CreatedAt)
			}
		}
	}

	// The CLI: --json carries the source, plain output notes it on stderr, stdout holds only
	// the answer.
	var ents []protocol.FileInfo
	if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "ls", "saved", "d", "--json")), &ents); err != nil || len(ents) != 6 {
		t.Fatalf("ls --json of the saved copy: %v %+v", err, ents)
	}
	for _, e := range ents {
		if e.Source != protocol.SourceSaved || e.SnapshotID != snap.ID || e.SavedAt == nil {
			t.Fatalf("ls --json entry without its source: %+v", e)
		}
	}
	var fi protocol.FileInfo
	if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "stat", "saved", "d/abs", "--json")), &fi); err != nil ||
		fi.Type != protocol.FileSymlink || fi.LinkTarget != "/etc/passwd" || fi.Source != protocol.SourceSaved || fi.SnapshotID != snap.ID {
		t.Fatalf("stat --json of a saved link: %v %+v", err, fi)
	}
	note := "source: saved (" + snap.ID + ", saved "
	r := c.cli(t, nil, "files", "get", "saved", "d/nested/big.bin")
	if r.Code != 0 || !bytes.Equal([]byte(r.Stdout), big) || !strings.HasPrefix(r.Stderr, note) {
		t.Fatalf("get of the saved copy: exit %d, %d bytes, stderr %q", r.Code, len(r.Stdout), r.Stderr)
	}
	if r := c.cli(t, nil, "files", "ls", "saved"); r.Code != 0 || r.Stdout != "d/\nd-sibling\nempty\nemptydir/\ntop.txt\n" || !strings.HasPrefix(r.Stderr, note) {
		t.Fatalf("plain ls of the saved copy: %+v", r)
	}
	if out := c.mustCLI(t, "files", "stat", "saved", "d/secret"); !strings.Contains(out, "Mode:      0600") || !strings.Contains(out, "Source:    "+note[len("source: "):]) {
		t.Fatalf("plain stat of the saved copy:\n%s", out)
	}
	dst := filepath.Join(t.TempDir(), "big.bin")
	var got struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
		protocol.ReadSource
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "get", "saved", "d/nested/big.bin", "-o", dst, "--json")), &got); err != nil ||
		got.Bytes != int64(len(big)) || got.SHA256 != sha256Hex(big) || got.Source != protocol.SourceSaved || got.SnapshotID != snap.ID {
		t.Fatalf("get -o --json of the saved copy: %v %+v", err, got)
	}
	if sha256Hex(readHost(t, dst)) != sha256Hex(big) {
		t.Fatal("get -o of the saved copy wrote other bytes")
	}
	expectCLIError(t, c.cli(t, nil, "files", "get", "saved", "../x"), protocol.CodePathEscape, "saved get of ../x")
	expectCLIError(t, c.cli(t, nil, "files", "get", "saved", "d/link"), protocol.CodeSymlinkRefused, "saved get of a link")
	expectCLIError(t, c.cli(t, nil, "files", "ls", "saved", "d/dirlink"), protocol.CodeSymlinkRefused, "saved ls of a link")
	expectCLIError(t, c.cli(t, nil, "files", "get", "saved", "top.txt", "--json"), protocol.CodeInvalidArgument, "get --json to stdout")

	// The headers of a raw read, and an HTTP suffix range.
	req, _ := http.NewRequest(http.MethodGet, c.Addr+"/v1/workspaces/"+ws.ID+"/files/"+url.PathEscape("d/nested/big.bin"), nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Range", "bytes=-100")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	at, perr := time.Parse(time.RFC3339, resp.Header.Get("X-Tether-Saved-At"))
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body.Bytes(), big[len(big)-100:]) ||
		resp.Header.Get("X-Tether-Source") != "saved" || resp.Header.Get("X-Tether-Snapshot") != snap.ID || perr != nil || !at.Equal(snap.CreatedAt) ||
		resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", len(big)-100, len(big)-1, len(big)) {
		t.Fatalf("suffix range of the saved copy: %d %v, %d bytes", resp.StatusCode, resp.Header, body.Len())
	}

	var reopened api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reopen", "saved", "--json")), &reopened); err != nil {
		t.Fatal(err)
	}
	if reopened.AllocationID == ws.AllocationID {
		t.Fatal("reopen kept the allocation")
	}
	var buf bytes.Buffer
	res, err := cl.ReadFile(ctx, ws.ID, "d/nested/big.bin", &buf, client.ReadOptions{})
	if err != nil || res.Source != protocol.SourceLive || res.AllocationID != reopened.AllocationID || res.SnapshotID != "" || res.SHA256 != sha256Hex(big) {
		t.Fatalf("read after reopen: %v %+v", err, res)
	}
	if r := c.cli(t, nil, "files", "get", "saved", "top.txt"); r.Code != 0 || r.Stdout != "top\n" || r.Stderr != "" {
		t.Fatalf("live get after reopen: %+v", r)
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "stat", "saved", "top.txt", "--json")), &fi); err != nil ||
		fi.Source != protocol.SourceLive || fi.AllocationID != reopened.AllocationID {
		t.Fatalf("stat --json after reopen: %v %+v", err, fi)
	}
}

// The hostile corpus, read from a saved copy, is refused exactly as the live tree refused it,
// and what succeeds answers the same. Special files are not archived: the saved copy has
// nothing at their paths.
func TestSavedHostileCorpusParity(t *testing.T) {
	e := newHostileEnv(t)
	cl := e.c.Client(t)
	corpus := e.corpus()
	specials := map[string]bool{"fifo": true, "sock": true, "chardev-null": true, "chardev-zero": true, "blockdev": true}
	ops := []string{"ls", "stat", "get", "range"}
	live := map[readProbe]string{}
	for _, in := range corpus {
		for _, op := range ops {
			p := readProbe{op, in.path}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			live[p], _ = p.run(ctx, cl, e.ws.ID)
			cancel()
		}
	}
	c := e.c
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", e.ws.ID, "--json")), &closed); err != nil || closed.Snapshot == nil {
		t.Fatalf("close: %v %+v", err, closed)
	}
	var cases int
	for _, in := range corpus {
		for _, op := range ops {
			p := readProbe{op, in.path}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			got, srcs := p.run(ctx, cl, e.ws.ID)
			cancel()
			want := live[p]
			if first, _, _ := strings.Cut(strings.TrimPrefix(in.path, "./"), "/"); specials[first] &&
				want != "error "+string(protocol.CodePathEscape) && want != "error "+string(protocol.CodeInvalidPath) {
				want = "error " + string(protocol.CodeNotFound)
			}
			if got != want {
				t.Errorf("%s: saved copy answers %q, the live tree answered %q", p, got, want)
			}
			for _, src := range srcs {
				if src.Source != protocol.SourceSaved || src.SnapshotID != closed.Saved {
					t.Fatalf("%s: source %+v", p, src)
				}
			}
			cases++
		}
	}
	t.Logf("%d inputs x %d read operations = %d cases compared live and saved", len(corpus), len(ops), cases)
}

// gateWriter hashes what it is given; once it has seen `after` bytes it signals reached and
// blocks until open is closed, holding the read in the middle of its stream.
type gateWriter struct {
	sum     hash.Hash
	n       int64
	after   int64
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.sum.Write(p)
	g.n += int64(len(p))
	if g.n >= g.after {
		g.once.Do(func() { close(g.reached) })
		<-g.open
	}
	return len(p), nil
}

// A saved read is pinned to the receipt it started on: while it streams, the workspace is
// reopened on a new allocation with a new writer epoch, its file is rewritten, a new receipt is
// made and the workspace is removed; the read still completes with the saved bytes.
func TestSavedReadPinnedWhileTheWorkspaceMoves(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "pinned")
	saved := randomBytes(t, 64<<20)
	mustWrite(t, filepath.Join(ws.Root, "big.bin"), saved, 0o644)
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "pinned", "--json")), &closed); err != nil || closed.Snapshot == nil {
		t.Fatalf("close: %v %+v", err, closed)
	}

	cl := c.Client(t)
	g := &gateWriter{sum: sha256.New(), after: 1 << 20, reached: make(chan struct{}), open: make(chan struct{})}
	type outcome struct {
		res client.ReadResult
		err error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		res, err := cl.ReadFile(ctx, ws.ID, "big.bin", g, client.ReadOptions{})
		done <- outcome{res, err}
	}()
	opened := false
	defer func() {
		if !opened {
			close(g.open)
		}
	}()
	select {
	case <-g.reached:
	case o := <-done:
		t.Fatalf("the read ended before it reached the gate: %+v %v", o.res, o.err)
	case <-time.After(time.Minute):
		t.Fatal("the read did not start")
	}

	var reopened api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reopen", "pinned", "--json")), &reopened); err != nil {
		t.Fatal(err)
	}
	if reopened.State != api.StateReady || reopened.AllocationID == ws.AllocationID || reopened.Epoch <= ws.Epoch {
		t.Fatalf("reopen: %+v", reopened)
	}
	rewritten := randomBytes(t, 1<<20)
	if err := os.WriteFile(filepath.Join(reopened.Root, "big.bin"), rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	var snap2 api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "pinned", "--json")), &snap2); err != nil || snap2.ID == closed.Saved {
		t.Fatalf("second receipt: %v %+v", err, snap2)
	}
	var live bytes.Buffer
	if res, err := cl.ReadFile(ctx, ws.ID, "big.bin", &live, client.ReadOptions{}); err != nil || res.Source != protocol.SourceLive ||
		res.AllocationID != reopened.AllocationID || !bytes.Equal(live.Bytes(), rewritten) {
		t.Fatalf("a new read while the pinned one waits: %v %+v", err, res)
	}
	c.mustCLI(t, "workspace", "rm", "pinned")
	if _, err := os.Stat(c.allocationDir(reopened)); !os.IsNotExist(err) {
		t.Fatalf("the new allocation survived rm: %v", err)
	}

	close(g.open)
	opened = true
	var o outcome
	select {
	case o = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the pinned read did not finish")
	}
	if o.err != nil {
		t.Fatalf("the pinned read failed: %v", o.err)
	}
	if got := hex.EncodeToString(g.sum.Sum(nil)); got != sha256Hex(saved) || g.n != int64(len(saved)) || o.res.SHA256 != got {
		t.Fatalf("the pinned read returned %d bytes with sha256 %s; the saved copy is %d bytes with sha256 %s", g.n, got, len(saved), sha256Hex(saved))
	}
	if o.res.Source != protocol.SourceSaved || o.res.SnapshotID != closed.Saved {
		t.Fatalf("the pinned read's source: %+v, want saved %s", o.res.ReadSource, closed.Saved)
	}
}

// A workspace whose runner is gone may hold work newer than its last receipt: its files are
// unavailable, never answered from that older save.
func TestSavedCopyNotServedWhileRunnerIsDown(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "down")
	mustWrite(t, filepath.Join(ws.Root, "f.txt"), []byte("saved version\n"), 0o644)
	c.mustCLI(t, "snapshot", "create", "down")
	mustWrite(t, filepath.Join(ws.Root, "f.txt"), []byte("unsaved version\n"), 0o644)
	if err := syscall.Kill(c.runnerPID(t, ws), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the controller to see the runner gone", func() bool { return !c.showWorkspace(t, "down").Connected })
	if got := c.showWorkspace(t, "down"); got.State != api.StateReady {
		t.Fatalf("workspace after its runner died: %+v", got)
	}
	expectCLIError(t, c.cli(t, nil, "files", "get", "down", "f.txt"), protocol.CodeUnavailable, "get with the runner down")
	expectCLIError(t, c.cli(t, nil, "files", "ls", "down"), protocol.CodeUnavailable, "ls with the runner down")
	expectCLIError(t, c.cli(t, nil, "files", "stat", "down", "f.txt", "--json"), protocol.CodeUnavailable, "stat with the runner down")
	var buf bytes.Buffer
	if _, err := c.Client(t).ReadFile(context.Background(), ws.ID, "f.txt", &buf, client.ReadOptions{}); codeOf(err) != protocol.CodeUnavailable || buf.Len() != 0 {
		t.Fatalf("client read with the runner down: %v, %q", err, buf.String())
	}
}

// A saved copy whose stored object no longer matches its receipt is never served: a read
// fails as corrupt, or, once it has started, is cut off, and get -o leaves nothing behind.
func TestSavedReadOfACorruptCopy(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "rot")
	data := randomBytes(t, 8<<20)
	mustWrite(t, filepath.Join(ws.Root, "data.bin"), data, 0o644)
	mustWrite(t, filepath.Join(ws.Root, "small.txt"), []byte("small\n"), 0o644)
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "rot", "--json")), &closed); err != nil || closed.Snapshot == nil {
		t.Fatalf("close: %v %+v", err, closed)
	}
	// A listing first: the controller now knows the manifest, so the read below reaches the
	// archive's bytes and must catch the damage itself.
	if out := c.mustCLI(t, "files", "ls", "rot"); out != "data.bin\nsmall.txt\n" {
		t.Fatalf("ls: %q", out)
	}
	obj := filepath.Join(c.Data, "blobs", filepath.FromSlash(closed.Snapshot.ObjectKey))
	b := readHost(t, obj)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if r := c.cli(t, nil, "files", "get", "rot", "data.bin", "-o", dst); r.Code == 0 {
		t.Fatalf("get of a damaged saved file succeeded: %+v", r)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a failed get -o left its output: %v", err)
	}
	var buf bytes.Buffer
	if _, err := c.Client(t).ReadFile(context.Background(), ws.ID, "data.bin", &buf, client.ReadOptions{Offset: 10, Length: 10}); err == nil {
		t.Fatal("a range of a damaged saved file was served")
	}

	// A controller that never saw the object whole refuses it outright.
	c.Stop()
	c2 := startController(t, serveOpts{data: c.Data})
	if r := c2.cli(t, nil, "files", "ls", "rot"); r.Code != protocol.CodeCorrupt.ExitCode() || !strings.HasPrefix(r.Stderr, "error: corrupt: ") {
		t.Fatalf("ls of a damaged saved copy: %+v", r)
	}
}
