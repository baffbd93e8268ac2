package service

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// waitDone waits for a service to reach a final state on its own.
func waitDone(t *testing.T, s *Service, within time.Duration) protocol.ServiceStatus {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(within):
		t.Fatalf("service %s did not stop on its own within %s: %+v", s.spec.Name, within, s.Status())
	}
	return s.Status()
}

func TestIdleServiceStopsItself(t *testing.T) {
	bin := buildServer(t)
	m := newManager(t)
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "idle", Argv: []string{bin, "PORT"},
		Ready: "tcp", StopPolicy: "idle:300ms"}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := m.Get("idle")
	// While a client holds a connection open the service is in use, however long that is.
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(st.Port))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if got := svc.Status(); got.State != protocol.ServiceReady {
		c.Close()
		t.Fatalf("a service with an open connection was stopped as idle: %+v", got)
	}
	c.Close()
	final := waitDone(t, svc, 20*time.Second)
	if final.State != protocol.ServiceStopped || !strings.Contains(final.Reason, "idle") {
		t.Fatalf("idle stop: %+v", final)
	}
	if groupAlive(st.PID) || portOpen(st.Port) {
		t.Fatal("an idle-stopped service left its group or its port behind")
	}
}

func TestManualServiceIsNotStoppedWhenIdle(t *testing.T) {
	m := newManager(t)
	if _, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "quiet", Argv: []string{"sleep", "60"}, Ready: ReadyNone}, os.Environ()); err != nil {
		t.Fatal(err)
	}
	svc, _ := m.Get("quiet")
	// The idle test above stops within a few polls of 300ms; a manual service outlives that.
	time.Sleep(time.Second)
	if st := svc.Status(); st.State != protocol.ServiceReady {
		t.Fatalf("a manual service stopped on its own: %+v", st)
	}
}

func TestRunFinishedStopsOnlyItsServices(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	for _, spec := range []protocol.ServiceSpec{
		{Name: "a", Argv: []string{"sleep", "60"}, Ready: ReadyNone, StopPolicy: StopOnRunFinish, Run: "run-1"},
		{Name: "b", Argv: []string{"sleep", "60"}, Ready: ReadyNone, StopPolicy: StopOnRunFinish, Run: "run-2"},
		{Name: "c", Argv: []string{"sleep", "60"}, Ready: ReadyNone},
	} {
		if _, err := m.Start(ctx, spec, os.Environ()); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.RunFinished("run-1"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("run-1 finished stopped %v, want [a]", got)
	}
	a, _ := m.Get("a")
	if st := waitDone(t, a, 10*time.Second); st.State != protocol.ServiceStopped || !strings.Contains(st.Reason, "run-1 finished") {
		t.Fatalf("a: %+v", st)
	}
	for _, name := range []string{"b", "c"} {
		s, _ := m.Get(name)
		if st := s.Status(); st.State != protocol.ServiceReady {
			t.Fatalf("%s was stopped by another run's end: %+v", name, st)
		}
	}
}

func TestStopPolicyChecks(t *testing.T) {
	m := newManager(t)
	for _, spec := range []protocol.ServiceSpec{
		{Name: "x", Argv: []string{"true"}, StopPolicy: "on-run-finish"},
		{Name: "x", Argv: []string{"true"}, StopPolicy: "idle:"},
		{Name: "x", Argv: []string{"true"}, StopPolicy: "idle:-1s"},
		{Name: "x", Argv: []string{"true"}, StopPolicy: "sometimes"},
	} {
		if _, err := m.Start(context.Background(), spec, nil); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Fatalf("stop policy %q (run %q): %v", spec.StopPolicy, spec.Run, err)
		}
	}
	if len(m.List()) != 0 {
		t.Fatal("a refused spec left a service behind")
	}
}

// A follower that falls more than a ring behind is told so (ErrOverrun at the offset it had
// reached); it never receives bytes from after the gap as if they followed on.
func TestFollowOverrunIsSaid(t *testing.T) {
	r := NewRing(16)
	r.Write([]byte("0123456789"))
	var got []byte
	end, err := r.Follow(context.Background(), 0, true, func(int64) error { return nil }, func(p []byte) error {
		got = append(got, p...)
		if len(got) == 10 {
			// While the reader handles its first chunk, 40 more bytes arrive: more than the ring.
			r.Write([]byte(strings.Repeat("x", 40)))
		}
		return nil
	})
	if err != ErrOverrun || end != 10 || string(got) != "0123456789" {
		t.Fatalf("follow: end %d err %v got %q", end, err, got)
	}
	_, from, _, _ := r.Read(end, 100)
	if from != 34 {
		t.Fatalf("the log resumes at %d, want 34", from)
	}
}
