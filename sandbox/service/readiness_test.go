package service

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Readiness without --ready: a connection accepted on the service's own port, never "started".

func TestServiceIgnoringItsPortIsNotReady(t *testing.T) {
	bin := buildServer(t)
	m := newManager(t)
	other, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	type attempt struct {
		name string
		argv []string
		env  []string
	}
	attempts := []attempt{
		// Listens, but on a port of its own choosing, not $PORT.
		{"elsewhere", []string{bin, "ELSEWHERE"}, []string{"ELSEWHERE=" + strconv.Itoa(other)}},
		// Runs and listens nowhere at all.
		{"sleeper", []string{"sleep", "60"}, nil},
	}
	if py, err := exec.LookPath("python3"); err == nil {
		// The case: python3 -m http.server ignores $PORT (here on a kernel-picked port).
		attempts = append(attempts, attempt{"python", []string{py, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"}, nil})
	}
	held := 0
	for _, a := range attempts {
		st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: a.name, Argv: a.argv, Env: a.env,
			ReadyTimeout: protocol.Duration(2 * time.Second)}, os.Environ())
		if protocol.CodeOf(err) != protocol.CodeTimeout || !strings.Contains(err.Error(), "nothing accepted a connection on its port 127.0.0.1:"+strconv.Itoa(st.Port)) {
			t.Errorf("%s: start answered %v (state %s); want timeout naming its port", a.name, err, st.State)
			continue
		}
		if st.State != protocol.ServiceFailed || !st.ReadyAt.IsZero() {
			t.Errorf("%s: status %+v", a.name, st)
			continue
		}
		held++
	}
	svc, _ := m.Get("elsewhere")
	if log, _, _ := readAll(t, svc.Log(), 0); !strings.Contains(log, "listening on "+strconv.Itoa(other)) {
		t.Errorf("the service that ignores its port did not listen elsewhere: %q", log)
	}
	t.Logf("service-readiness: %d services ignoring their port tried, %d never reported ready (timeout)", len(attempts), held)
}

func TestServiceListeningOnItsPortIsReadyByTCP(t *testing.T) {
	bin := buildServer(t)
	m := newManager(t)
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "web", Argv: []string{bin, "PORT"},
		ReadyTimeout: protocol.Duration(30 * time.Second)}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	if st.State != protocol.ServiceReady || st.Spec.Ready != ReadyTCP {
		t.Fatalf("status %+v", st)
	}
	// Ready means the port accepts connections now, not that a process was started.
	if !portOpen(st.Port) {
		t.Fatalf("reported ready on port %d, which accepts no connection", st.Port)
	}
}

func TestReadyNoneIsStartedOnlyWhenAsked(t *testing.T) {
	m := newManager(t)
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "worker", Argv: []string{"sleep", "60"}, Ready: ReadyNone}, os.Environ())
	if err != nil || st.State != protocol.ServiceReady {
		t.Fatalf("a worker with --ready none: %+v, %v", st, err)
	}
}
