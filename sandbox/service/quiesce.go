package service

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Quiesce refuses new services until Resume: a close stops every service before its last save,
// and a service started meanwhile would write after it.
func (m *Manager) Quiesce() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.quiesced = true
}

// Resume accepts new services again.
func (m *Manager) Resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.quiesced = false
}

// StopEvery stops every service that is not over yet, all at once, each with Stop's verified stop
// (its group gone, its port closed), and reports those, sorted by name. A service whose
// stop was already asked for (its run finished, it went idle) keeps that reason and is waited for.
// The services that could not be stopped are named in the error, which carries the first one's
// code.
func (m *Manager) StopEvery(ctx context.Context, grace time.Duration, reason string) ([]protocol.ServiceStatus, error) {
	m.mu.Lock()
	svcs := make([]*Service, 0, len(m.svcs))
	for _, s := range m.svcs {
		if !s.final() {
			svcs = append(svcs, s)
		}
	}
	m.mu.Unlock()
	out := make([]protocol.ServiceStatus, len(svcs))
	errs := make([]error, len(svcs))
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.stopFor(ctx, grace, reason)
		}()
	}
	wg.Wait()
	sortStatuses(out)
	var failed []string
	code := protocol.CodeFailed
	for _, err := range errs {
		if err == nil {
			continue
		}
		if len(failed) == 0 {
			code = protocol.CodeOf(err)
		}
		failed = append(failed, protocol.AsError(err).Message)
	}
	if len(failed) > 0 {
		return out, protocol.Errorf(code, "%d of %d service(s) did not stop: %s", len(failed), len(svcs), strings.Join(failed, "; "))
	}
	return out, nil
}
