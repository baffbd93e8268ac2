package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

const serverSrc = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	port := os.Getenv(os.Args[1])
	fmt.Println("listening on", port)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("request %s %s\n", r.Method, r.URL.Path)
		fmt.Fprintln(w, "hello")
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// buildServer builds a tiny HTTP server that serves on 127.0.0.1:$<argv[1]> and prints each
// request line.
func buildServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(serverSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module srv\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "srv")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type testManager struct {
	*Manager
	root string
}

func newManager(t *testing.T, opts ...Option) testManager {
	root := t.TempDir()
	m := NewManager(func(rel string) (string, func(), error) { return filepath.Join(root, rel), func() {}, nil }, opts...)
	t.Cleanup(func() { m.StopAll(time.Second) })
	return testManager{m, root}
}

func groupAlive(pgid int) bool { return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }

func portOpen(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func readAll(t *testing.T, r *Ring, off int64) (string, int64, int64) {
	t.Helper()
	var b bytes.Buffer
	var start int64
	end, err := r.Follow(context.Background(), off, false, func(from int64) error { start = from; return nil },
		func(p []byte) error { b.Write(p); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), start, end
}

func TestHTTPServiceLifecycle(t *testing.T) {
	bin := buildServer(t)
	m := newManager(t)
	ctx := context.Background()
	st, err := m.Start(ctx, protocol.ServiceSpec{Name: "web", Argv: []string{bin, "WEBPORT"}, PortEnv: "WEBPORT",
		Ready: "http:/health", ReadyTimeout: protocol.Duration(20 * time.Second)}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	if st.State != protocol.ServiceReady || st.Port == 0 || st.PID == 0 {
		t.Fatalf("status %+v", st)
	}
	if _, err := m.Start(ctx, protocol.ServiceSpec{Name: "web", Argv: []string{"true"}}, nil); protocol.CodeOf(err) != protocol.CodeExists {
		t.Fatalf("duplicate start: %v", err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/hello", st.Port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	svc, _ := m.Get("web")
	// The first read stops somewhere; a second from its end continues without gap or duplicate.
	var first string
	var mid int64
	for deadline := time.Now().Add(5 * time.Second); ; {
		first, _, mid = readAll(t, svc.Log(), 0)
		if strings.Contains(first, "request GET /hello") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log has no request line: %q", first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(first, "listening on "+strconv.Itoa(st.Port)) || !strings.Contains(first, "request GET /health") {
		t.Fatalf("log: %q", first)
	}
	resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/again", st.Port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Follow from the middle in the background while the service stops: it ends at the stop.
	type res struct {
		s   string
		end int64
	}
	got := make(chan res, 1)
	go func() {
		var b bytes.Buffer
		end, _ := svc.Log().Follow(ctx, mid, true, func(int64) error { return nil }, func(p []byte) error { b.Write(p); return nil })
		got <- res{b.String(), end}
	}()
	pgid := st.PID
	stopped, err := m.Stop(ctx, "web", 2*time.Second)
	if err != nil || stopped.State != protocol.ServiceStopped {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	if groupAlive(pgid) {
		t.Fatal("process group still alive after stop")
	}
	if portOpen(st.Port) {
		t.Fatal("port still open after stop")
	}
	select {
	case r := <-got:
		all, _, end := readAll(t, svc.Log(), 0)
		if first+r.s != all || r.end != end {
			t.Fatalf("resumed log differs:\nfirst %q\nrest  %q\nall   %q", first, r.s, all)
		}
		if !strings.Contains(r.s, "request GET /again") {
			t.Fatalf("follow missed the later request: %q", r.s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the service stopped")
	}
	// A stopped name may be started again.
	if list := m.List(); len(list) != 1 || list[0].State != protocol.ServiceStopped {
		t.Fatalf("list: %+v", list)
	}
}

func TestNeverReadyFailsWithStderrTail(t *testing.T) {
	m := newManager(t)
	start := time.Now()
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "stuck", Argv: []string{"sh", "-c", "echo $$ > pid; echo boom >&2; sleep 60"},
		Ready: "http:/", ReadyTimeout: protocol.Duration(time.Second)}, os.Environ())
	if protocol.CodeOf(err) != protocol.CodeTimeout || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("start: %v", err)
	}
	if st.State != protocol.ServiceFailed || !strings.Contains(st.StderrTail, "boom") {
		t.Fatalf("status: %+v", st)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("took too long")
	}
	raw, err := os.ReadFile(filepath.Join(m.root, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if pgid == 0 || groupAlive(pgid) {
		t.Fatalf("process group %d survived the failed start", pgid)
	}
}

func TestCrashingServiceRestartsBounded(t *testing.T) {
	m := newManager(t)
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "crash", Argv: []string{"sh", "-c", "echo crashing >&2; exit 3"},
		Ready: "tcp", ReadyTimeout: protocol.Duration(10 * time.Second), Restart: "on-failure", MaxRestarts: 2}, os.Environ())
	if protocol.CodeOf(err) != protocol.CodeFailed {
		t.Fatalf("start: %v", err)
	}
	if st.State != protocol.ServiceFailed || st.Restarts != 2 || !strings.Contains(st.Reason, "exited with code 3") {
		t.Fatalf("status: %+v", st)
	}
	s, _ := m.Get("crash")
	if log, _, _ := readAll(t, s.Log(), 0); strings.Count(log, "crashing") != 3 {
		t.Fatalf("want 3 runs in the log: %q", log)
	}
}

func TestRingOffsets(t *testing.T) {
	r := NewRing(8)
	r.Write([]byte("abcdef"))
	r.Write([]byte("ghij"))
	if s, e := r.Bounds(); s != 2 || e != 10 {
		t.Fatalf("bounds %d %d", s, e)
	}
	p, from, _, _ := r.Read(0, 100)
	if from != 2 || string(p) != "cdefghij" {
		t.Fatalf("read %d %q", from, p)
	}
	p, from, _, _ = r.Read(7, 2)
	if from != 7 || string(p) != "hi" {
		t.Fatalf("read %d %q", from, p)
	}
	r.Write([]byte("0123456789XYZ"))
	p, from, _, _ = r.Read(0, 100)
	if from != 15 || string(p) != "56789XYZ" {
		t.Fatalf("read %d %q", from, p)
	}
}
