package controller

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// fakeServiceRunner answers the service operations on a runner's session: with lie set, every
// status it reports carries that port instead of the one it was given.
type fakeServiceRunner struct {
	mu      sync.Mutex
	lie     int
	given   map[string]int // the port each start asked for
	stopped []string
}

func (f *fakeServiceRunner) serve(sess *yamux.Session) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			_ = st.SetDeadline(time.Now().Add(guard))
			var h protocol.Header
			if protocol.ReadJSON(st, &h) != nil {
				return
			}
			_ = protocol.WriteJSON(st, f.answer(h))
		}()
	}
}

func (f *fakeServiceRunner) status(name string) protocol.ServiceStatus {
	port := f.given[name]
	if f.lie != 0 {
		port = f.lie
	}
	return protocol.ServiceStatus{Name: name, State: protocol.ServiceReady, Port: port, PID: 4242, ReadyAt: time.Now()}
}

func (f *fakeServiceRunner) answer(h protocol.Header) protocol.Trailer {
	f.mu.Lock()
	defer f.mu.Unlock()
	var result any
	switch h.Op {
	case protocol.OpServiceStart:
		var spec protocol.ServiceSpec
		_ = json.Unmarshal(h.Args, &spec)
		f.given[spec.Name] = spec.Port
		result = f.status(spec.Name)
	case protocol.OpServiceList:
		list := []protocol.ServiceStatus{}
		for name := range f.given {
			list = append(list, f.status(name))
		}
		result = list
	case protocol.OpServiceStop:
		var args protocol.ServiceStopArgs
		_ = json.Unmarshal(h.Args, &args)
		f.stopped = append(f.stopped, args.Name)
		delete(f.given, args.Name)
		result = protocol.ServiceStatus{Name: args.Name, State: protocol.ServiceStopped}
	default:
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnsupported, "fake runner: %s", h.Op)}
	}
	b, _ := json.Marshal(result)
	return protocol.Trailer{OK: true, Result: b}
}

func TestRunnerReportedPortOtherThanAllottedIsRefused(t *testing.T) {
	tc := newTestController(t)
	tc.s.advertise = tc.url
	u, _ := url.Parse(tc.url)
	ownPort, _ := strconv.Atoi(u.Port())
	al, sess, _ := tc.connectRunner(t, "ports")
	// What provisioning does once the runner is connected.
	if err := tc.s.store.TransitionWorkspace(context.Background(), al.workspaceID, wsstate.FinishProvision, "", ""); err != nil {
		t.Fatal(err)
	}
	runner := &fakeServiceRunner{given: map[string]int{}}
	go runner.serve(sess)
	cl, err := client.New(tc.url, tc.s.OperatorToken())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// An honest runner: --port auto gets a port the controller allotted, reported back as is.
	v, err := cl.StartService(ctx, al.workspaceID, protocol.ServiceSpec{Name: "honest", Argv: []string{"srv"}})
	if err != nil {
		t.Fatalf("honest start: %v", err)
	}
	runner.mu.Lock()
	allotted := runner.given["honest"]
	runner.lie = ownPort
	runner.mu.Unlock()
	if allotted == 0 || v.Port != allotted || v.State != protocol.ServiceReady {
		t.Fatalf("honest start: %+v, the runner was given port %d", v, allotted)
	}

	tried, held := 0, 0
	refused := func(what string, err error) {
		t.Helper()
		tried++
		if protocol.CodeOf(err) != protocol.CodeConflict {
			t.Errorf("%s: %v, want conflict", what, err)
			return
		}
		held++
	}
	// From now on the runner reports the controller's own port for everything.
	_, err = cl.StartService(ctx, al.workspaceID, protocol.ServiceSpec{Name: "auto", Argv: []string{"srv"}})
	refused("start --port auto, reported on the controller's port", err)
	_, err = cl.StartService(ctx, al.workspaceID, protocol.ServiceSpec{Name: "given", Argv: []string{"srv"}, Port: 5555})
	refused("start --port 5555, reported on the controller's port", err)
	ep, err := cl.ServiceEndpoint(ctx, al.workspaceID, "honest")
	refused("endpoint of a service now reported on the controller's port", err)
	if ep.URL != "" {
		t.Errorf("an endpoint was published: %+v", ep)
	}

	list, err := cl.ListServices(ctx, al.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"honest": allotted, "given": 5555}
	for _, s := range list {
		if s.Port == ownPort {
			t.Errorf("service %s is recorded on the controller's port: %+v", s.Name, s)
		}
		if p, ok := want[s.Name]; ok && (s.Port != p || s.State != protocol.ServiceFailed) {
			t.Errorf("service %s: %+v, want failed on its allotted port %d", s.Name, s, p)
		}
	}
	stored, err := tc.s.store.ListServices(ctx, al.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		if s.Port == ownPort || s.State == protocol.ServiceReady {
			t.Errorf("stored: %+v", s)
		}
	}
	runner.mu.Lock()
	stopped := len(runner.stopped)
	runner.mu.Unlock()
	if stopped != 2 {
		t.Errorf("the runner was asked to stop %d of the 2 services it lied about starting", stopped)
	}
	t.Logf("service-ports: %d spoofed ports tried, %d refused (conflict), none published", tried, held)
}

func TestOwnAddressIsNoEndpoint(t *testing.T) {
	s := &Server{advertise: "http://127.0.0.1:7420"}
	for _, ep := range []string{"http://127.0.0.1:7420/", "http://localhost:7420", "http://[::1]:7420/x", "http://0.0.0.0:7420"} {
		if protocol.CodeOf(s.ownAddress(ep)) != protocol.CodeConflict {
			t.Errorf("%s was taken for a service's endpoint", ep)
		}
	}
	for _, ep := range []string{"http://127.0.0.1:7421/", "http://172.18.0.2:7420/"} {
		if err := s.ownAddress(ep); err != nil {
			t.Errorf("%s: %v", ep, err)
		}
	}
}

// An allotted port is never the advertised address's: the kernel may choose it where the
// controller runs although the balancer listens on it elsewhere.
func TestAllotAvoidsTheAdvertisedPort(t *testing.T) {
	if got := advertisedPort("http://10.0.0.1:39955"); got != 39955 {
		t.Fatalf("advertisedPort = %d", got)
	}
	seq := []int{39955, 39955, 41000}
	allot := func() (int, error) { p := seq[0]; seq = seq[1:]; return p, nil }
	if p, err := allotAvoiding(39955, allot); err != nil || p != 41000 {
		t.Fatalf("allotAvoiding = %d, %v; want 41000", p, err)
	}
	always := func() (int, error) { return 39955, nil }
	if _, err := allotAvoiding(39955, always); err == nil {
		t.Fatal("a kernel that only offers the own port: no error")
	}
}
