package service

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/process"
)

// Stop policies.
const (
	StopManual      = "manual"
	StopOnRunFinish = "on-run-finish"
	idlePrefix      = "idle:"
)

// idleFor parses an idle:DUR stop policy.
func idleFor(policy string) (time.Duration, bool) {
	if !strings.HasPrefix(policy, idlePrefix) {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimPrefix(policy, idlePrefix))
	if err != nil || d <= 0 {
		return 0, false
	}
	return d, true
}

// watchIdle stops a ready service with an idle:DUR policy once it has gone DUR without activity,
// and returns a func that ends the watching. Activity is what the runner can observe of a
// service without standing in its traffic: a connection open on its port at a poll, or new log
// bytes (dev servers log their requests). Polls and idle time are on the service's clock; each
// poll re-arms a one-shot timer once the last one was handled, so a fake clock's waiter count says
// when the watcher waits.
func (s *Service) watchIdle(proc *process.Process) (stop func()) {
	idle, ok := idleFor(s.spec.StopPolicy)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		poll := min(max(idle/10, 10*time.Millisecond), time.Second)
		t := s.clock.NewTimer(poll)
		defer t.Stop()
		last := s.clock.Now()
		_, logEnd := s.log.Bounds()
		for {
			select {
			case <-ctx.Done():
				return
			case <-proc.Done():
				return
			case <-t.Chan():
			}
			_, end := s.log.Bounds()
			if end != logEnd || connectionsOn(s.port) > 0 {
				logEnd, last = end, s.clock.Now()
			} else if s.clock.Since(last) >= idle {
				s.requestStop(DefaultGrace, fmt.Sprintf("stopped after %s idle (stop policy %s)", idle, s.spec.StopPolicy))
				return
			}
			t.Reset(poll)
		}
	}()
	return func() { cancel(); <-done }
}

// RunFinished stops, without waiting, every service whose stop policy is on-run-finish for run.
// It returns the names of the services it asked to stop.
func (m *Manager) RunFinished(run string) []string {
	m.mu.Lock()
	var names []string
	var svcs []*Service
	for name, s := range m.svcs {
		if s.spec.StopPolicy == StopOnRunFinish && s.spec.Run == run && !s.final() {
			names, svcs = append(names, name), append(svcs, s)
		}
	}
	m.mu.Unlock()
	for _, s := range svcs {
		s.requestStop(DefaultGrace, "stopped because run "+run+" finished (stop policy on-run-finish)")
	}
	return names
}

// connectionsOn counts the TCP connections whose local port is port and that carry or await
// traffic (established, half-closed or being accepted), over IPv4 and IPv6, as the kernel lists
// them for the runner's network namespace.
func connectionsOn(port int) int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		n += countConnections(f, port)
	}
	return n
}

// Socket states in /proc/net/tcp that mean a connection is open at the service's end.
var activeStates = map[string]bool{
	"01": true, // ESTABLISHED
	"03": true, // SYN_RECV
	"08": true, // CLOSE_WAIT
}

func countConnections(path string, port int) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // the header line
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !activeStates[fields[3]] {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			n++
		}
	}
	return n
}
