package runner

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

const testServerSrc = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("request %s %s\n", r.Method, r.URL.Path)
	})
	http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil)
}
`

func buildTestServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "main.go"), []byte(testServerSrc), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module srv\n\ngo 1.22\n"), 0o644)
	cmd := exec.Command("go", "build", "-o", "srv", ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "srv")
}

// reconnect serves r on a fresh in-memory session, as after a websocket drop.
func reconnect(t *testing.T, r *Runner) *yamux.Session {
	a, b := net.Pipe()
	runnerSide, _ := protocol.MuxClient(a)
	ctlSide, _ := protocol.MuxServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = r.serve(ctx, runnerSide) }()
	t.Cleanup(func() { cancel(); ctlSide.Close(); runnerSide.Close() })
	return ctlSide
}

// readLogs opens a service_logs stream and reads until the end frame; with until set it closes
// the stream once that text arrived, as a controller whose client went away.
func readLogs(t *testing.T, sess *yamux.Session, args protocol.ServiceLogsArgs, until string) (from int64, data string, end int64) {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw, _ := json.Marshal(args)
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpServiceLogs, Args: raw}); err != nil {
		t.Fatal(err)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil || !tr.OK {
		t.Fatalf("logs reply: %+v %v", tr, err)
	}
	var rep protocol.ServiceLogsReply
	_ = json.Unmarshal(tr.Result, &rep)
	_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		ch, p, err := protocol.ReadFrame(st, nil)
		if err != nil {
			t.Fatalf("logs frame: %v (so far %q)", err, data)
		}
		switch ch {
		case protocol.ChanStdout:
			data += string(p)
			if until != "" && strings.Contains(data, until) {
				st.Close() // the controller goes away; the runner ends the stream
				until = ""
			}
		case protocol.ChanExit:
			var e protocol.ServiceLogsEnd
			_ = json.Unmarshal(p, &e)
			return rep.Offset, data, e.Offset
		}
	}
}

func TestServiceOps(t *testing.T) {
	bin := buildTestServer(t)
	r, sess := pipeRunner(t)
	t.Cleanup(r.Shutdown)
	r.cfg.Env = os.Environ()
	tr := op(t, sess, protocol.OpServiceStart, 1, protocol.ServiceSpec{Name: "web", Argv: []string{bin}, Ready: "http:/ready"})
	if !tr.OK {
		t.Fatalf("start: %+v", tr.Error)
	}
	var st protocol.ServiceStatus
	_ = json.Unmarshal(tr.Result, &st)
	if st.State != protocol.ServiceReady || st.Port == 0 {
		t.Fatalf("status %+v", st)
	}
	if tr := op(t, sess, protocol.OpServiceStart, 1, protocol.ServiceSpec{Name: "web", Argv: []string{bin}}); tr.OK || tr.Error.Code != protocol.CodeExists {
		t.Fatalf("duplicate: %+v", tr)
	}
	// Followed until the readiness probe's line is in: readiness is the probe's answer, which can
	// come before the runner has copied the line the server printed first from its pipe.
	from, data, end := readLogs(t, sess, protocol.ServiceLogsArgs{Name: "web", Follow: true}, "request GET /ready")
	if from != 0 || !strings.Contains(data, "request GET /ready") || end != int64(len(data)) {
		t.Fatalf("logs: %d %q %d", from, data, end)
	}

	// The connection drops; the service lives on and is listed on the next one.
	sess.Close()
	sess2 := reconnect(t, r)
	tr = op(t, sess2, protocol.OpServiceList, 0, struct{}{})
	var list []protocol.ServiceStatus
	_ = json.Unmarshal(tr.Result, &list)
	if len(list) != 1 || list[0].State != protocol.ServiceReady {
		t.Fatalf("list after reconnect: %+v", list)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(st.Port))); err != nil {
		t.Fatalf("service gone after the drop: %v", err)
	} else {
		c.Close()
	}
	// Follow from the earlier end; the controller abandons the stream once it saw a new line.
	go func() {
		time.Sleep(100 * time.Millisecond)
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(st.Port)))
		if err == nil {
			_, _ = c.Write([]byte("GET /later HTTP/1.0\r\n\r\n"))
			// Held until the server has answered (and, HTTP/1.0, closed).
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	from2, data2, end2 := readLogs(t, sess2, protocol.ServiceLogsArgs{Name: "web", Offset: end, Follow: true}, "/later")
	if from2 != end || !strings.HasPrefix(data2, "request GET /later") || end2 != end+int64(len(data2)) {
		t.Fatalf("resumed logs: %d %q %d (prev end %d)", from2, data2, end2, end)
	}

	tr = op(t, sess2, protocol.OpServiceStop, 1, protocol.ServiceStopArgs{Name: "web"})
	if !tr.OK {
		t.Fatalf("stop: %+v", tr.Error)
	}
	_ = json.Unmarshal(tr.Result, &st)
	if st.State != protocol.ServiceStopped {
		t.Fatalf("stop status %+v", st)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(st.Port))); err == nil {
		c.Close()
		t.Fatal("port still open after stop")
	}
	if tr := op(t, sess2, protocol.OpServiceStop, 1, protocol.ServiceStopArgs{Name: "nope"}); tr.OK || tr.Error.Code != protocol.CodeNotFound {
		t.Fatalf("stop unknown: %+v", tr)
	}
	tr = op(t, sess2, protocol.OpServiceStart, 1, protocol.ServiceSpec{Name: "bad", Argv: []string{"sh", "-c", "echo boom >&2; sleep 60"},
		Ready: "http:/", ReadyTimeout: protocol.Duration(time.Second)})
	if tr.OK || tr.Error.Code != protocol.CodeTimeout || !strings.Contains(tr.Error.Message, "boom") {
		t.Fatalf("never ready: %+v", tr)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
