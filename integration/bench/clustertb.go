package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// benchTB is the testing.TB the cluster harness (and the PostgreSQL and MinIO helpers under it)
// takes, for the bench, which is a program and not a test. It behaves as a test's T does for
// what they call: Fatal and Skip end the goroutine running the phase (runtime.Goexit, as T's
// do), Cleanup functions run last-in first-out once the phase ends, TempDir is removed with
// them.
//
// testing.TB has an unexported method, so a type outside package testing satisfies it only by
// embedding it: the embedded interface is nil and every method is defined below, so none of its
// own is ever called.
type benchTB struct {
	testing.TB
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
	msgs     []string // what Error, Fatal and Skip said
}

// runPhase runs fn on a goroutine of its own with a fresh benchTB named name, then its
// cleanups. It returns why fn skipped ("" if it did not) or, if it failed, an error with what
// it said.
func runPhase(name string, fn func(t testing.TB)) (skipped string, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := &benchTB{name: name, ctx: ctx, cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	tb.runCleanups()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch {
	case tb.failed:
		return "", fmt.Errorf("%s: %s", name, strings.Join(tb.msgs, "; "))
	case tb.skipped:
		return strings.Join(tb.msgs, "; "), nil
	}
	return "", nil
}

// runCleanups runs the cleanups last first, on this goroutine; one that calls FailNow ends
// only itself, as in a test.
func (tb *benchTB) runCleanups() {
	tb.cancel()
	for {
		tb.mu.Lock()
		n := len(tb.cleanups)
		if n == 0 {
			tb.mu.Unlock()
			return
		}
		f := tb.cleanups[n-1]
		tb.cleanups = tb.cleanups[:n-1]
		tb.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		<-done
	}
}

func (tb *benchTB) say(failed, skipped bool, msg string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = tb.failed || failed
	tb.skipped = tb.skipped || skipped
	tb.msgs = append(tb.msgs, msg)
}

func (tb *benchTB) Helper()                    {}
func (tb *benchTB) Name() string               { return tb.name }
func (tb *benchTB) Context() context.Context   { return tb.ctx }
func (tb *benchTB) Output() io.Writer          { return os.Stderr }
func (tb *benchTB) Attr(key, value string)     {}
func (tb *benchTB) Log(args ...any)            { progress("%s: %s", tb.name, fmt.Sprint(args...)) }
func (tb *benchTB) Logf(f string, args ...any) { progress("%s: %s", tb.name, fmt.Sprintf(f, args...)) }

func (tb *benchTB) Error(args ...any) {
	tb.say(true, false, fmt.Sprint(args...))
	tb.Log(args...)
}

func (tb *benchTB) Errorf(f string, args ...any) {
	tb.say(true, false, fmt.Sprintf(f, args...))
	tb.Logf(f, args...)
}

func (tb *benchTB) Fail() { tb.say(true, false, "failed") }

func (tb *benchTB) FailNow() {
	tb.mu.Lock()
	tb.failed = true
	tb.mu.Unlock()
	runtime.Goexit()
}

func (tb *benchTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}

func (tb *benchTB) Fatal(args ...any) {
	tb.Error(args...)
	runtime.Goexit()
}

func (tb *benchTB) Fatalf(f string, args ...any) {
	tb.Errorf(f, args...)
	runtime.Goexit()
}

func (tb *benchTB) Skip(args ...any) {
	tb.say(false, true, fmt.Sprint(args...))
	runtime.Goexit()
}

func (tb *benchTB) Skipf(f string, args ...any) {
	tb.say(false, true, fmt.Sprintf(f, args...))
	runtime.Goexit()
}

func (tb *benchTB) SkipNow() {
	tb.say(false, true, "skipped")
	runtime.Goexit()
}

func (tb *benchTB) Skipped() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.skipped
}

func (tb *benchTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// TempDir is a new directory, removed once the phase ends.
func (tb *benchTB) TempDir() string {
	dir, err := os.MkdirTemp("", "tether-bench-cluster-")
	if err != nil {
		tb.Fatalf("TempDir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (tb *benchTB) ArtifactDir() string { return tb.TempDir() }

// Setenv and Chdir change the whole process: nothing the bench runs needs them.
func (tb *benchTB) Setenv(key, value string) {
	tb.Fatalf("Setenv(%q) is not supported in the bench", key)
}
func (tb *benchTB) Chdir(dir string) { tb.Fatalf("Chdir(%q) is not supported in the bench", dir) }
