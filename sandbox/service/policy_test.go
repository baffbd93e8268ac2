package service

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

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

// advanceWhileReady passes fake time on clock in steps, each once something waits on the clock
// (an idle watcher's poll: so every step is seen by the watcher), while svc is ready, up to upTo.
// It returns the time passed.
func advanceWhileReady(t *testing.T, clock *clockwork.FakeClock, svc *Service, step, upTo time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var passed time.Duration
	for passed < upTo && svc.Status().State == protocol.ServiceReady {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("nothing waits on the clock after %s of fake time: %v (%+v)", passed, err, svc.Status())
		}
		clock.Advance(step)
		passed += step
	}
	return passed
}

func TestIdleServiceStopsItself(t *testing.T) {
	clock := clockwork.NewFakeClock()
	m := newManager(t, WithClock(clock))
	// The watcher sees what the kernel lists for the service's port. The test holds the port's
	// listener (and so the connections to it) itself: the service is ready at its first probe,
	// and no real time passes for readiness.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	st, err := m.Start(context.Background(), protocol.ServiceSpec{Name: "idle", Argv: []string{"sleep", "60"},
		Port: port, Ready: "tcp", StopPolicy: "idle:300ms"}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := m.Get("idle")
	// While a client holds a connection open the service is in use, however long that is.
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(st.Port))
	if err != nil {
		t.Fatal(err)
	}
	advanceWhileReady(t, clock, svc, 10*time.Millisecond, 1500*time.Millisecond)
	if got := svc.Status(); got.State != protocol.ServiceReady {
		c.Close()
		t.Fatalf("a service with an open connection was stopped as idle: %+v", got)
	}
	c.Close()
	ln.Close()
	if passed := advanceWhileReady(t, clock, svc, 10*time.Millisecond, time.Minute); passed >= time.Minute {
		t.Fatalf("a service idle for %s is still up: %+v", passed, svc.Status())
	}
	final := waitDone(t, svc, 20*time.Second)
	if final.State != protocol.ServiceStopped || !strings.Contains(final.Reason, "idle") {
		t.Fatalf("idle stop: %+v", final)
	}
	if groupAlive(st.PID) || portOpen(st.Port) {
		t.Fatal("an idle-stopped service left its group or its port behind")
	}
}

func TestManualServiceIsNotStoppedWhenIdle(t *testing.T) {
	clock := clockwork.NewFakeClock()
	m := newManager(t, WithClock(clock))
	for _, spec := range []protocol.ServiceSpec{
		{Name: "quiet", Argv: []string{"sleep", "60"}, Ready: ReadyNone},
		// The control: the same service with an idle policy, which the same time stops.
		{Name: "idler", Argv: []string{"sleep", "60"}, Ready: ReadyNone, StopPolicy: "idle:300ms"},
	} {
		if _, err := m.Start(context.Background(), spec, os.Environ()); err != nil {
			t.Fatal(err)
		}
	}
	quiet, _ := m.Get("quiet")
	idler, _ := m.Get("idler")
	passed := advanceWhileReady(t, clock, idler, 10*time.Millisecond, time.Minute)
	if st := waitDone(t, idler, 20*time.Second); st.State != protocol.ServiceStopped || !strings.Contains(st.Reason, "idle") {
		t.Fatalf("the idle control after %s: %+v", passed, st)
	}
	if st := quiet.Status(); st.State != protocol.ServiceReady {
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
