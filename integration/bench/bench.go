package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// bench holds the two subjects: a tether workspace and a Docker container, both idle until used.
type bench struct {
	cfg      config
	t        *tetherEnv
	d        *dockerEnv // nil without Docker
	noDocker string     // why d is nil
	rep      *report

	ws        api.Workspace
	runnerPID int
	ctr       string // the reference container's id
	shimPID   int
}

func (b *bench) all(ctx context.Context) error {
	progress("creating the bench workspace")
	ws, _, err := b.t.createWorkspace(ctx, "bench")
	if err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	b.ws = ws
	if b.runnerPID, err = b.t.runnerPID(ws); err != nil {
		return fmt.Errorf("runner pid: %w", err)
	}
	if b.d != nil {
		progress("starting the reference container")
		id, _, err := b.d.runCLI(ctx)
		if err != nil {
			b.rep.note("reference container did not start: %v", err)
		} else {
			b.ctr = id
			if b.shimPID, err = b.d.shimPID(ctx, id); err != nil {
				b.rep.note("containerd shim of the reference container not found: %v", err)
			}
		}
	}
	b.sizes()
	if err := b.idleRSS(ctx); err != nil {
		return err
	}
	type step struct {
		name string
		run  func(context.Context) error
		skip bool
	}
	steps := []step{{"starts", b.starts, false}, {"execs", b.execs, false}, {"isolation", b.isolationCost, false},
		{"throughput", b.throughputs, false}, {"runs", b.runs, false}, {"rss", b.peakRSS, false}, {"files", b.files, false},
		{"snapshot", b.snapshots, b.cfg.noSnap}, {"dockerprovider", b.dockerProvider, b.cfg.noDProv},
		{"cp", b.cpTrees, false}, {"pull", b.pullBack, b.cfg.noSnap},
		{"project", b.projects, b.cfg.noProj}, {"cluster", b.cluster, b.cfg.noClust}, {"reach", b.reach, b.cfg.noReach}}
	for _, st := range steps {
		if st.skip || (b.cfg.only != nil && !b.cfg.only[st.name]) {
			continue
		}
		if err := st.run(ctx); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// ref measures a reference figure; without Docker or on failure the figure is n/a and the
// reason goes to the notes.
func (b *bench) ref(what string, needCtr bool, fn func() (float64, error)) (*float64, string) {
	if b.d == nil {
		return nil, "n/a: no Docker"
	}
	if needCtr && b.ctr == "" {
		return nil, "n/a: no container"
	}
	v, err := fn()
	if err != nil {
		progress("%s: %v", what, err)
		b.rep.note("%s failed: %v", what, err)
		return nil, "failed, see notes"
	}
	return &v, ""
}

func (b *bench) api() (*engineAPI, error) {
	if b.d.api == nil {
		return nil, fmt.Errorf("engine API unavailable: %v", b.d.apiErr)
	}
	return b.d.api, nil
}

func (b *bench) sizes() {
	runner := filepath.Join(b.cfg.binDir, "tether-runner")
	size, err := fileSize(runner)
	if err != nil {
		b.rep.note("runner size: %v", err)
	}
	shim, shimErr := "", error(nil)
	if b.shimPID > 0 {
		shim, shimErr = os.Readlink(fmt.Sprintf("/proc/%d/exe", b.shimPID))
	} else {
		shim, shimErr = shimBinary()
	}
	res := result{Metric: "runner binary size", Unit: unitBytes, Tether: &size, TetherTool: "tether-runner (" + elfKind(runner) + ")",
		ReferenceTool: "containerd-shim-runc-v2, Docker's per-container agent"}
	if shimErr != nil {
		res.Note = "n/a: " + shimErr.Error()
	} else {
		res.ReferenceTool += " (" + shim + ", " + elfKind(shim) + ")"
		if s, err := fileSize(shim); err == nil {
			res.Reference = &s
		}
	}
	b.rep.add(res)
}

// elfKind says whether a binary is static and stripped.
func elfKind(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "not ELF"
	}
	defer f.Close()
	kind := "static"
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			kind = "dynamic"
		}
	}
	if f.Section(".symtab") == nil {
		return kind + ", stripped"
	}
	return kind + ", not stripped"
}

func (b *bench) idleRSS(ctx context.Context) error {
	progress("letting both agents idle for 2s")
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	rss, err := vmRSS(b.runnerPID)
	if err != nil {
		return fmt.Errorf("runner RSS: %w", err)
	}
	ref, note := b.shimMem("idle shim RSS", vmRSS)
	b.rep.add(result{Metric: "idle RSS of a connected agent", Unit: unitBytes, Tether: &rss, TetherTool: "tether-runner VmRSS",
		Reference: ref, ReferenceTool: "containerd-shim-runc-v2 VmRSS, idle `sleep` container", Note: note})
	return nil
}

func (b *bench) peakRSS(context.Context) error {
	hwm := func(pid int) (float64, error) {
		v, err := procStatus(pid, "VmHWM")
		if err != nil {
			return 0, err
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
		return float64(kb * 1024), err
	}
	peak, err := hwm(b.runnerPID)
	if err != nil {
		return fmt.Errorf("runner peak RSS: %w", err)
	}
	ref, note := b.shimMem("shim peak RSS", hwm)
	b.rep.add(result{Metric: "peak RSS over all the exec load above", Unit: unitBytes, Tether: &peak, TetherTool: "tether-runner VmHWM",
		Reference: ref, ReferenceTool: "containerd-shim-runc-v2 VmHWM, same container", Note: note})
	return nil
}

func (b *bench) shimMem(what string, read func(int) (float64, error)) (*float64, string) {
	return b.ref(what, true, func() (float64, error) {
		if b.shimPID == 0 {
			return 0, errors.New("no shim pid")
		}
		return read(b.shimPID)
	})
}

// starts times sandbox creation to ready, each started sandbox removed untimed.
func (b *bench) starts(ctx context.Context) error {
	n := b.cfg.starts
	progress("start to ready: %d tether workspaces through the Go client", n)
	goStarts, err := timedStarts(ctx, n, func(i int) (time.Duration, error) {
		ws, took, err := b.t.createWorkspace(ctx, fmt.Sprintf("start-go-%d", i))
		if ws.ID != "" {
			if derr := b.t.deleteWorkspace(ctx, ws.ID); err == nil {
				err = derr
			}
		}
		return took, err
	})
	if err != nil {
		return fmt.Errorf("workspace start: %w", err)
	}
	progress("start to ready: %d tether workspaces through the CLI", n)
	cliStarts, err := timedStarts(ctx, n, func(i int) (time.Duration, error) {
		id, took, err := b.t.cliCreate(ctx, fmt.Sprintf("start-cli-%d", i))
		if id != "" {
			if derr := b.t.deleteWorkspace(ctx, id); err == nil {
				err = derr
			}
		}
		return took, err
	})
	if err != nil {
		return fmt.Errorf("workspace start (CLI): %w", err)
	}
	dockerStart := func(run func(context.Context) (string, time.Duration, error)) func() (float64, error) {
		return func() (float64, error) {
			s, err := timedStarts(ctx, n, func(int) (time.Duration, error) {
				id, took, err := run(ctx)
				if id != "" {
					b.d.removeNow(ctx, id, "")
				}
				return took, err
			})
			return ms(summarize(s).P50), err
		}
	}
	apiRef, apiNote := b.ref("Engine API container start", false, func() (float64, error) {
		if _, err := b.api(); err != nil {
			return 0, err
		}
		progress("start to running: %d containers through the Engine API", n)
		return dockerStart(b.d.runAPI)()
	})
	cliRef, cliNote := b.ref("docker run -d", false, func() (float64, error) {
		progress("start to running: %d containers through `docker run -d`", n)
		return dockerStart(b.d.runCLI)()
	})
	title := fmt.Sprintf("start → ready, p50 of %d", n)
	b.rep.add(result{Metric: title, Unit: unitMS, Tether: val(ms(summarize(goStarts).P50)), N: n, RefN: n,
		TetherTool: "Go client CreateWorkspace (returns after the runner's hello)",
		Reference:  apiRef, ReferenceTool: "Engine API create+start of a busybox container", Note: apiNote})
	b.rep.add(result{Metric: title, Unit: unitMS, Tether: val(ms(summarize(cliStarts).P50)), N: n, RefN: n,
		TetherTool: "`tether workspace create`",
		Reference:  cliRef, ReferenceTool: "`docker run -d --network none` busybox `sleep`", Note: cliNote})
	return nil
}

// timedStarts runs one untimed warm-up start, then n timed ones.
func timedStarts(ctx context.Context, n int, start func(int) (time.Duration, error)) ([]time.Duration, error) {
	var out []time.Duration
	for i := range n + 1 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		took, err := start(i)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, took)
		}
	}
	return out, nil
}

// execs times round trips of `true`.
func (b *bench) execs(ctx context.Context) error {
	n, cliN := b.cfg.n, b.cfg.cliN
	progress("exec round trip: %d × `true` through the Go client", n)
	goExec, err := sample(ctx, n, 5, func() error { return b.t.exec(ctx, b.ws.ID, io.Discard, "true") })
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	progress("exec round trip: %d × `true` through the tether CLI", cliN)
	cliExec, err := sample(ctx, cliN, 2, func() error { return b.t.cli(ctx, io.Discard, "exec", b.ws.ID, "--", "true") })
	if err != nil {
		return fmt.Errorf("exec (CLI): %w", err)
	}
	progress("exec floor: %d × fork+exec+wait of `true` on the host", n)
	floor, err := sample(ctx, n, 5, func() error { return exec.CommandContext(ctx, "true").Run() })
	if err != nil {
		return fmt.Errorf("local true: %w", err)
	}
	var apiExec, dockerExec durStats
	apiP50, apiNote := b.ref("Engine API exec", true, func() (float64, error) {
		e, err := b.api()
		if err != nil {
			return 0, err
		}
		progress("exec round trip: %d × `true` through the Engine API", n)
		s, err := sample(ctx, n, 3, func() error { return e.exec(ctx, b.ctr, io.Discard, "true") })
		apiExec = summarize(s)
		return ms(apiExec.P50), err
	})
	cliP50, cliNote := b.ref("docker exec", true, func() (float64, error) {
		progress("exec round trip: %d × `docker exec CONTAINER true`", cliN)
		s, err := sample(ctx, cliN, 2, func() error { return b.d.execCLI(ctx, b.ctr, io.Discard, "true") })
		dockerExec = summarize(s)
		return ms(dockerExec.P50), err
	})
	p90 := func(p50 *float64, s durStats) *float64 {
		if p50 == nil {
			return nil
		}
		return val(ms(s.P90))
	}
	g, c := summarize(goExec), summarize(cliExec)
	apiTool := "Engine API exec create+start+inspect (what `docker exec` does)"
	cliTool := "`docker exec CONTAINER true`"
	for _, r := range []result{
		{Metric: fmt.Sprintf("exec `true` round trip p50 of %d", n), N: n, RefN: n, Tether: val(ms(g.P50)),
			TetherTool: "Go client Exec", Reference: apiP50, ReferenceTool: apiTool, Note: apiNote},
		{Metric: fmt.Sprintf("exec `true` round trip p90 of %d", n), N: n, RefN: n, Tether: val(ms(g.P90)),
			TetherTool: "Go client Exec", Reference: p90(apiP50, apiExec), ReferenceTool: apiTool, Note: apiNote},
		{Metric: fmt.Sprintf("exec `true` round trip p50 of %d", cliN), N: cliN, RefN: cliN, Tether: val(ms(c.P50)),
			TetherTool: "`tether exec`", Reference: cliP50, ReferenceTool: cliTool, Note: cliNote},
		{Metric: fmt.Sprintf("exec `true` round trip p90 of %d", cliN), N: cliN, RefN: cliN, Tether: val(ms(c.P90)),
			TetherTool: "`tether exec`", Reference: p90(cliP50, dockerExec), ReferenceTool: cliTool, Note: cliNote},
		{Metric: fmt.Sprintf("exec `true` round trip p50 of %d", n), N: n, RefN: n, Tether: val(ms(g.P50)),
			TetherTool: "Go client Exec", Reference: val(ms(summarize(floor).P50)),
			ReferenceTool: "floor: host fork+exec+wait of `true` (os/exec), no sandbox, no network"},
	} {
		r.Unit = unitMS
		b.rep.add(r)
	}
	return nil
}

// throughputs streams head -c SIZE /dev/zero out of each sandbox into a counting SHA-256 writer.
func (b *bench) throughputs(ctx context.Context) error {
	size, rounds := b.cfg.size, b.cfg.rounds
	want := zeroSHA256(size)
	argv := []string{"head", "-c", strconv.FormatInt(size, 10), "/dev/zero"}
	mib := size >> 20
	progress("throughput: %d × %d MiB through the Go client", rounds, mib)
	goT, err := throughput(ctx, rounds, size, want, func(w io.Writer) error { return b.t.exec(ctx, b.ws.ID, w, argv...) })
	if err != nil {
		return fmt.Errorf("exec throughput: %w", err)
	}
	progress("throughput: %d × %d MiB through the tether CLI", rounds, mib)
	cliT, err := throughput(ctx, rounds, size, want, func(w io.Writer) error {
		return b.t.cli(ctx, w, append([]string{"exec", b.ws.ID, "--"}, argv...)...)
	})
	if err != nil {
		return fmt.Errorf("exec throughput (CLI): %w", err)
	}
	apiRef, apiNote := b.ref("Engine API exec throughput", true, func() (float64, error) {
		e, err := b.api()
		if err != nil {
			return 0, err
		}
		progress("throughput: %d × %d MiB through the Engine API", rounds, mib)
		s, err := throughput(ctx, rounds, size, want, func(w io.Writer) error { return e.exec(ctx, b.ctr, w, argv...) })
		return median(s), err
	})
	cliRef, cliNote := b.ref("docker exec throughput", true, func() (float64, error) {
		progress("throughput: %d × %d MiB through `docker exec`", rounds, mib)
		s, err := throughput(ctx, rounds, size, want, func(w io.Writer) error { return b.d.execCLI(ctx, b.ctr, w, argv...) })
		return median(s), err
	})
	title := fmt.Sprintf("%d MiB exec stdout (count+SHA-256 checked), median of %d", mib, rounds)
	b.rep.add(result{Metric: title, Unit: unitMiBps, Tether: val(median(goT)), TetherTool: "Go client Exec", N: rounds, RefN: rounds,
		Reference: apiRef, ReferenceTool: "Engine API exec, raw stream demuxed", Note: apiNote})
	b.rep.add(result{Metric: title, Unit: unitMiBps, Tether: val(median(cliT)), TetherTool: "`tether exec` piped", N: rounds, RefN: rounds,
		Reference: cliRef, ReferenceTool: "`docker exec CONTAINER head ...` piped", Note: cliNote})
	return nil
}
