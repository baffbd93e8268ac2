package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

const (
	// ptyKeys is how many keystrokes the PTY rows time (after ptyWarm untimed ones).
	ptyKeys = 200
	ptyWarm = 10
	// ptyWait bounds the wait for one echoed keystroke.
	ptyWait = 10 * time.Second
	// logMiB is the size of the log the replay rows read back.
	logMiB = 50
)

// runs measures issue 18's rows: a keystroke's round trip through `tether exec -it` and through
// `docker exec -it`, each driven by the same code under a real pseudo-terminal, and the replay of
// a finished run's 50 MiB log (`tether run logs`) beside `docker logs` of a container that wrote
// the same bytes.
func (b *bench) runs(ctx context.Context) error {
	tetherArgv := []string{filepath.Join(b.cfg.binDir, "tether"), "exec", "-it", b.ws.ID, "--", "cat"}
	progress("pty: %d keystrokes through `tether exec -it WS -- cat`", ptyKeys)
	tt, err := ptyEcho(ctx, tetherArgv, append(cleanEnv(), "TETHER_ADDR="+b.t.addr, "TETHER_TOKEN="+b.t.token))
	if err != nil {
		return fmt.Errorf("pty echo through tether: %w", err)
	}
	var dt durStats
	refP50, refNote := b.ref("docker exec -it", true, func() (float64, error) {
		progress("pty: %d keystrokes through `docker exec -it CONTAINER cat`", ptyKeys)
		s, err := ptyEcho(ctx, []string{"docker", "exec", "-it", b.ctr, "cat"}, os.Environ())
		dt = s
		return ms(s.P50), err
	})
	refP99 := func() *float64 {
		if refP50 == nil {
			return nil
		}
		return val(ms(dt.P99))
	}()
	tool, refTool := "`tether exec -it WS -- cat` under a pty", "`docker exec -it CONTAINER cat` under a pty"
	b.rep.note("PTY rows: the bench holds the pty master of each CLI, writes one byte and times until the byte comes back (echoed by the sandbox's terminal line discipline, so the round trip crosses the whole path twice); %d untimed keystrokes first.", ptyWarm)
	for _, r := range []result{
		{Metric: fmt.Sprintf("PTY keystroke echo round trip p50 of %d", ptyKeys), Tether: val(ms(tt.P50)), Reference: refP50},
		{Metric: fmt.Sprintf("PTY keystroke echo round trip p99 of %d", ptyKeys), Tether: val(ms(tt.P99)), Reference: refP99},
	} {
		r.Unit, r.TetherTool, r.ReferenceTool, r.N, r.RefN, r.Note = unitMS, tool, refTool, ptyKeys, ptyKeys, refNote
		b.rep.add(r)
	}
	return b.logReplay(ctx)
}

// logCommand writes logMiB MiB of text lines to stdout.
var logCommand = fmt.Sprintf("yes 0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz | head -c %d", logMiB<<20)

// logReplay times `tether run logs` of a finished detached run that wrote logMiB MiB, beside
// `docker logs` of a container that wrote the same.
func (b *bench) logReplay(ctx context.Context) error {
	var out bytes.Buffer
	if err := b.t.cli(ctx, &out, "exec", "--detach", b.ws.ID, "--", "sh", "-c", logCommand); err != nil {
		return fmt.Errorf("detached run: %w", err)
	}
	run := strings.TrimSpace(out.String())
	if err := b.t.cli(ctx, io.Discard, "run", "wait", run); err != nil {
		return fmt.Errorf("run wait %s: %w", run, err)
	}
	size := int64(logMiB << 20)
	progress("run logs: %d × `tether run logs %s` of %d MiB", b.cfg.rounds, run, logMiB)
	tr, err := timedRounds(ctx, b.cfg.rounds, size, func() (time.Duration, error) {
		var cw countWriter
		start := time.Now()
		err := b.t.cli(ctx, &cw, "run", "logs", run)
		took := time.Since(start)
		if err == nil && cw.n != size {
			err = fmt.Errorf("run logs printed %d bytes, the run wrote %d", cw.n, size)
		}
		return took, err
	})
	if err != nil {
		return fmt.Errorf("run logs: %w", err)
	}
	ref, refNote := b.ref("docker logs", false, func() (float64, error) {
		// The daemon's default log options may rotate at a few MiB: keep the whole output.
		id, err := b.d.output(ctx, "run", "-d", "--log-driver", "json-file", "--log-opt", "max-size=1g", benchImage, "sh", "-c", logCommand)
		id = strings.TrimSpace(id)
		if err != nil {
			return 0, err
		}
		b.d.track(id)
		if _, err := b.d.output(ctx, "wait", id); err != nil {
			return 0, err
		}
		progress("run logs: %d × `docker logs CONTAINER` of %d MiB", b.cfg.rounds, logMiB)
		r, err := timedRounds(ctx, b.cfg.rounds, size, func() (time.Duration, error) {
			var cw countWriter
			start := time.Now()
			err := b.d.run(ctx, &cw, "logs", id)
			took := time.Since(start)
			if err == nil && cw.n != size {
				err = fmt.Errorf("docker logs printed %d bytes, the container wrote %d", cw.n, size)
			}
			return took, err
		})
		if err != nil {
			return 0, err
		}
		return median(r.mibps), nil
	})
	b.rep.add(result{Metric: fmt.Sprintf("replay of a finished run's %d MiB output", logMiB), Unit: unitMiBps,
		Tether: val(median(tr.mibps)), TetherTool: "`tether run logs RUN` to a pipe", N: len(tr.mibps),
		Reference: ref, ReferenceTool: "`docker logs CONTAINER` to a pipe (json-file driver)", RefN: b.cfg.rounds, Note: refNote})
	return nil
}

// ptyEcho starts argv on a new pseudo-terminal and times ptyKeys keystrokes' echo.
func ptyEcho(ctx context.Context, argv, env []string) (durStats, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(env, "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		return durStats{}, err
	}
	defer func() {
		tty.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	got := make(chan byte, 4096)
	var readErr error
	go func() {
		defer close(got)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			for _, c := range buf[:n] {
				got <- c
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	key := func(c byte) (time.Duration, error) {
		start := time.Now()
		if _, err := tty.Write([]byte{c}); err != nil {
			return 0, err
		}
		timeout := time.NewTimer(ptyWait)
		defer timeout.Stop()
		for {
			select {
			case b, ok := <-got:
				if !ok {
					return 0, fmt.Errorf("the terminal closed: %v", readErr)
				}
				if b == c {
					return time.Since(start), nil
				}
			case <-timeout.C:
				return 0, fmt.Errorf("no echo of %q within %s", c, ptyWait)
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	// Until the CLI puts the terminal in raw mode, this terminal's own line discipline would
	// echo the keys: timing starts once echo is off here, so every echo is the sandbox's.
	if err := waitRaw(ctx, tty); err != nil {
		return durStats{}, err
	}
	var ds []time.Duration
	for i := range ptyWarm + ptyKeys {
		took, err := key("abcdefghijklmnopqrstuvwxyz"[i%26])
		if err != nil {
			return durStats{}, fmt.Errorf("keystroke %d: %w", i+1, err)
		}
		if i >= ptyWarm {
			ds = append(ds, took)
		}
	}
	// End the line and cat's input, then let the CLI exit with cat's status.
	if _, err := tty.Write([]byte("\n\x04")); err != nil {
		return durStats{}, err
	}
	done := make(chan error, 1)
	go func() {
		for range got { // drain until the terminal closes
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return durStats{}, err
		}
		if err != nil {
			return durStats{}, fmt.Errorf("%s exited: %v", argv[0], err)
		}
	case <-time.After(30 * time.Second):
		return durStats{}, fmt.Errorf("%s did not exit after EOF", argv[0])
	}
	return summarize(ds), nil
}

// waitRaw waits until the program on tty turned its echo off (raw mode).
func waitRaw(ctx context.Context, tty *os.File) error {
	deadline := time.Now().Add(ptyWait)
	for {
		t, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			return fmt.Errorf("read the terminal's mode: %w", err)
		}
		if t.Lflag&unix.ECHO == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the terminal is still in cooked mode after %s", ptyWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
