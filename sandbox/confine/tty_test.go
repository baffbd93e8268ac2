package confine

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/tetherhq/tether/sandbox/process"
)

// A terminal command in the sandbox runs on a terminal of the sandbox's own devpts, which
// belongs to the agent, at the size of the runner's; the runner's side stays raw (one echo, one
// CRLF per line: the sandbox's terminal's).
func TestNamespacesTerminal(t *testing.T) {
	f := newSandbox(t)
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 33, Cols: 77}); err != nil {
		t.Fatal(err)
	}
	script := `echo "tty=$(tty) owner=$(stat -c %u:%g $(tty)) size=$(stty size)"; read x; echo "read=$x"; sleep 100 & exit 5`
	p, err := process.Start(process.Spec{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: f.workspace, Stdin: slave, Stdout: slave, Stderr: slave, Terminal: true, Confiner: f.policy})
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := master.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = io.Copy(&out, master) // EIO once the init, the last holder, is gone
	exit, err := p.Wait(t.Context())
	if err != nil || exit.Code != 5 {
		t.Fatalf("exit %+v %v, output %q", exit, err, out.String())
	}
	// The echo comes whenever the init relays the keystrokes, before or after the first line.
	got := out.String()
	for _, want := range []string{"tty=/dev/pts/0 owner=1000:1000 size=33 77\r\n", "read=typed\r\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("output %q lacks %q", got, want)
		}
	}
	if strings.Count(got, "typed") != 2 || strings.Count(got, "\r\n") != 3 {
		t.Fatalf("output %q: want one echo and one CRLF per line", got)
	}
}
