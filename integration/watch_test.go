package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// watchReader reads a watch's events in the background, so the test can act and look.
type watchReader struct {
	events chan protocol.WatchEvent
	end    chan error
}

func readWatch(w *client.Watch) *watchReader {
	r := &watchReader{events: make(chan protocol.WatchEvent, 1<<16), end: make(chan error, 1)}
	go func() {
		for {
			ev, err := w.Next()
			if err != nil {
				r.end <- err
				close(r.events)
				return
			}
			r.events <- ev
		}
	}()
	return r
}

// until takes events until stop says so; it fails the test if the watch ends or nothing
// satisfies stop within the bound (a bound on liveness, not a timing assertion).
func (r *watchReader) until(t *testing.T, what string, stop func(protocol.WatchEvent) bool) []protocol.WatchEvent {
	t.Helper()
	var got []protocol.WatchEvent
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-r.events:
			if !ok {
				t.Fatalf("the watch ended (%v) before %s; got %d events", <-r.end, what, len(got))
			}
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-timeout:
			t.Fatalf("no %s after %d events", what, len(got))
		}
	}
}

func execSh(t *testing.T, c *controllerProc, ws, script string) {
	t.Helper()
	c.mustCLI(t, "exec", ws, "--", "sh", "-c", script)
}

// A watch through a real runner: the agent's create, write, rename and remove arrive in order;
// a burst of 10,000 creations arrives whole or with an overflow event, never silently short;
// bad paths are refused with their typed errors; the CLI prints human lines and Ctrl-C exits 0;
// a runner that goes away ends the stream with unavailable.
func TestFilesWatch(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cl := c.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	execSh(t, c, ws.ID, "mkdir -p src/sub && : > src/file && ln -s /etc src/link && ln -s sub src/inner-link")

	// Refusals are typed, before any stream starts.
	for _, bad := range []struct{ path, code string }{
		{"missing", "not_found"}, {"src/file", "not_directory"}, {"src/link", "symlink_refused"},
		{"src/inner-link", "symlink_refused"}, {"../outside", "path_escape"}, {"/etc", "path_escape"},
	} {
		r := c.cli(t, nil, "files", "watch", ws.ID, bad.path)
		if r.Code == 0 || !strings.Contains(r.Stderr, "error: "+bad.code+":") {
			t.Errorf("watch %s: exit %d, stderr %q; want %s", bad.path, r.Code, r.Stderr, bad.code)
		}
	}

	w, err := cl.Watch(ctx, ws.ID, "src", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Watches != 2 {
		t.Errorf("watches = %d, want 2 (src, src/sub)", w.Watches)
	}
	events := readWatch(w)

	// In order.
	execSh(t, c, ws.ID, "echo a > src/sub/a.go && chmod 600 src/sub/a.go && echo b >> src/sub/a.go && mv src/sub/a.go src/b.go && rm src/b.go")
	got := events.until(t, "the remove of src/b.go", func(ev protocol.WatchEvent) bool {
		return ev.Type == protocol.WatchRemove && ev.Path == "src/b.go"
	})
	want := []string{"create src/sub/a.go", "write src/sub/a.go", "chmod src/sub/a.go", "write src/sub/a.go",
		"rename src/sub/a.go>src/b.go", "remove src/b.go"}
	var seen []string
	for _, ev := range got {
		s := ev.Type + " " + ev.Path
		if ev.Type == protocol.WatchRename {
			s = ev.Type + " " + ev.OldPath + ">" + ev.Path
		}
		if len(seen) < len(want) && s == want[len(seen)] {
			seen = append(seen, s)
		}
		if ev.Time.IsZero() {
			t.Errorf("an event without a time: %+v", ev)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("in order, saw %q of %q; events: %+v", seen, want, got)
	}

	// A file written through Tether shows as its final name only.
	if _, err := cl.WriteFile(ctx, ws.ID, "src/put.txt", strings.NewReader("x"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.until(t, "the create of src/put.txt", func(ev protocol.WatchEvent) bool { return ev.Path == "src/put.txt" }) {
		if strings.Contains(ev.Path+ev.OldPath, ".tether-") {
			t.Fatalf("a staging name: %+v", ev)
		}
	}

	// A burst of 10,000 creations in a directory made for it.
	const burst = 10000
	execSh(t, c, ws.ID, fmt.Sprintf("mkdir src/burst && cd src/burst && i=0; while [ $i -lt %d ]; do : > f$i; i=$((i+1)); done", burst))
	created := map[string]bool{}
	overflowed := false
	// A sentinel made after the burst says everything before it was read; after an overflow,
	// the sentinel itself may be dropped, so one is made until one is seen.
	sentinels := 0
	deadline := time.Now().Add(3 * time.Minute)
	for done := false; !done; {
		sentinels++
		execSh(t, c, ws.ID, fmt.Sprintf(": > src/done-%d", sentinels))
		timer := time.NewTimer(2 * time.Second)
	read:
		for {
			select {
			case ev, ok := <-events.events:
				if !ok {
					t.Fatalf("the watch ended during the burst: %v", <-events.end)
				}
				switch {
				case ev.Type == protocol.WatchOverflow:
					overflowed = true
				case ev.Type == protocol.WatchCreate && strings.HasPrefix(ev.Path, "src/burst/"):
					created[ev.Path] = true
				case ev.Type == protocol.WatchCreate && strings.HasPrefix(ev.Path, "src/done-"):
					done = true
					break read
				}
			case <-timer.C:
				break read
			}
		}
		timer.Stop()
		if !done && time.Now().After(deadline) {
			t.Fatalf("no sentinel seen after the burst (%d creates, overflow %v)", len(created), overflowed)
		}
	}
	t.Logf("burst of %d: %d creations seen, overflow %v", burst, len(created), overflowed)
	if !overflowed && len(created) != burst {
		t.Fatalf("silently incomplete: %d of %d creations and no overflow event", len(created), burst)
	}

	// The CLI: human lines, Ctrl-C exits 0.
	cmd := c.cliCmd("files", "watch", ws.ID, "src")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The watch is in place once one of these is seen; until then each is made again.
	for i, seenLine := 0, false; !seenLine; i++ {
		execSh(t, c, ws.ID, fmt.Sprintf("mkdir src/cli-%d", i))
		timer := time.NewTimer(time.Second)
	wait:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the CLI ended: %s", stderr.String())
				}
				if strings.HasPrefix(l, "CREATE  src/cli-") && strings.HasSuffix(l, "/") {
					seenLine = true
					break wait
				}
			case <-timer.C:
				break wait
			}
		}
		timer.Stop()
		if i > 60 {
			t.Fatal("the CLI printed no CREATE line")
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("Ctrl-C: %v (stderr %q), want exit 0", err, stderr.String())
	}

	// The runner goes away: the stream ends, saying so.
	if err := syscall.Kill(c.runnerPID(t, ws), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range events.events {
	}
	if err := <-events.end; protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("after the runner was killed: %v, want unavailable", err)
	}
}
