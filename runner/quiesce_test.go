package runner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// writerService appends a counter line to the file named in argv[1], fsynced, every few
// milliseconds while it listens on $PORT; SIGTERM makes it write "stopped N" and exit.
const writerService = `
import os, signal, socket, sys, time
f = open(sys.argv[1], "a")
stopping = False
def stop(*_):
    # Only a flag: writing from the handler could run inside line()'s own write (a reentrant
    # buffered write fails) or between "n += 1" and its line; the loop writes the last line.
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, stop)
def line(text):
    f.write(text + "\n")
    f.flush()
    os.fsync(f.fileno())
n = 1
line(str(n))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen() # ready (tcp) only once a counter line is in
while not stopping:
    time.sleep(0.003)
    if not stopping:
        n += 1
        line(str(n))
line("stopped %d" % n)
sys.exit(0)
`

// execStarted starts a command on its own stream and returns once it printed its first line.
func execStarted(t *testing.T, sess *yamux.Session, argv []string) (exit chan protocol.ExecExit) {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(protocol.ExecArgs{RunID: "run_q", Argv: argv})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpExec, Args: raw}); err != nil {
		t.Fatal(err)
	}
	printed := make(chan struct{})
	exit = make(chan protocol.ExecExit, 1)
	go func() {
		defer st.Close()
		once := false
		for {
			ch, p, err := protocol.ReadFrame(st, nil)
			if err != nil {
				close(exit)
				return
			}
			switch ch {
			case protocol.ChanStdout:
				if !once {
					once = true
					close(printed)
				}
			case protocol.ChanExit:
				var e protocol.ExecExit
				_ = json.Unmarshal(p, &e)
				exit <- e
				return
			}
		}
	}()
	select {
	case <-printed:
	case <-exit:
		t.Fatal("the run ended before it printed")
	}
	return exit
}

// Quiesce stops every run and service (each sees SIGTERM and gets to write its last line), only
// answers once they are gone, and refuses new ones until released.
func TestQuiesceStopsRunsAndServicesThenRefusesNewOnes(t *testing.T) {
	r, sess := pipeRunner(t)
	root := r.cfg.Root
	tried, held := 0, 0
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		tried++
		if !ok {
			t.Errorf(format, args...)
			return
		}
		held++
	}

	exit := execStarted(t, sess, []string{"sh", "-c", `trap 'echo stopped >> run.log; exit 0' TERM; echo started; while :; do sleep 0.01; done`})
	tr := op(t, sess, protocol.OpServiceStart, 0, protocol.ServiceSpec{Name: "writer", Ready: "tcp",
		Argv: []string{"/usr/bin/python3", "-c", writerService, filepath.Join(root, "svc.log")}})
	if !tr.OK {
		t.Fatalf("service start: %+v", tr.Error)
	}
	var started protocol.ServiceStatus
	decodeTrailer(t, tr, &started)

	tr = op(t, sess, protocol.OpQuiesce, 0, protocol.QuiesceArgs{Grace: protocol.Duration(5 * time.Second)})
	if !tr.OK {
		t.Fatalf("quiesce: %+v", tr.Error)
	}
	var res protocol.QuiesceResult
	decodeTrailer(t, tr, &res)
	check(len(res.Runs) == 1 && res.Runs[0].RunID == "run_q" && res.Runs[0].Finished, "quiesce runs: %+v", res.Runs)
	check(len(res.Services) == 1 && res.Services[0].State == protocol.ServiceStopped, "quiesce services: %+v", res.Services)
	check(errors.Is(syscall.Kill(-started.PID, 0), syscall.ESRCH), "the service's process group %d outlived the quiesce", started.PID)
	e := <-exit
	check(e.ExitCode == 0, "the run did not exit through its TERM trap: %+v", e)
	b, _ := os.ReadFile(filepath.Join(root, "run.log"))
	check(string(b) == "stopped\n", "run.log = %q, want the run's last line", b)
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(root, "svc.log"))), "\n")
	last := lines[len(lines)-1]
	check(len(lines) > 1 && last == "stopped "+lines[len(lines)-2], "svc.log ends %q, want the service's own last line after %d counter lines", last, len(lines)-1)

	// The gate is closed: nothing new starts until it is released.
	tr = op(t, sess, protocol.OpServiceStart, 0, protocol.ServiceSpec{Name: "late", Argv: []string{"sleep", "60"}})
	check(!tr.OK && tr.Error.Code == protocol.CodeConflict, "service start while quiesced: %+v", tr)
	check(execCode(t, sess, "run_late") == protocol.CodeConflict, "exec while quiesced was not refused")
	_, err := os.Stat(filepath.Join(root, "late"))
	check(err != nil, "a run started while quiesced")
	if tr := op(t, sess, protocol.OpQuiesce, 0, protocol.QuiesceArgs{Release: true}); !tr.OK {
		t.Fatalf("release: %+v", tr.Error)
	}
	check(execCode(t, sess, "run_after") == "", "exec after release refused")
	t.Logf("quiesce: %d promises tried, %d held (run and service stopped with their last lines written, then new ones refused until released)", tried, held)
}

// execCode runs "touch late" as run id and returns the code its exit frame carries, "" if it ran.
func execCode(t *testing.T, sess *yamux.Session, id string) protocol.Code {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw, _ := json.Marshal(protocol.ExecArgs{RunID: id, Argv: []string{"touch", "late"}})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpExec, Args: raw}); err != nil {
		t.Fatal(err)
	}
	for {
		ch, p, err := protocol.ReadFrame(st, nil)
		if err != nil {
			t.Fatalf("exec %s: %v", id, err)
		}
		if ch == protocol.ChanExit {
			var e protocol.ExecExit
			if err := json.Unmarshal(p, &e); err != nil {
				t.Fatal(err)
			}
			if e.Error != nil {
				return e.Error.Code
			}
			return ""
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
