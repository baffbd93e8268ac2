package main

import (
	"archive/tar"
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
)

const (
	// runnerImage is the Docker provider's default image; the references use it too.
	runnerImage = "tether-runner:dev"
	// dockerFileSize is the file moved into and out of the Docker workspace (issue 6: 256 MiB).
	dockerFileSize = 256 << 20
	// cpFile is the name `docker cp` gives the host file in /workspace, beside wsFile.
	cpFile = "bench-cp.bin"
)

// dockerProvider measures workspaces on the Docker provider beside the docker CLI on the same
// image: create → ready against `docker run --rm IMAGE true`, and a 256 MiB file put and got
// through the runner against `docker cp` into and out of the same container.
func (b *bench) dockerProvider(ctx context.Context) error {
	skip := func(why string) error {
		progress("Docker provider rows skipped: %s", why)
		b.rep.note("Docker provider rows skipped: %s", why)
		return nil
	}
	if b.d == nil {
		return skip("no Docker (" + b.noDocker + ")")
	}
	if _, err := os.Stat(filepath.Join(b.cfg.binDir, "tether-provider-docker")); err != nil {
		return skip(err.Error() + " (run `make build`)")
	}
	if err := b.ensureRunnerImage(ctx); err != nil {
		return skip(err.Error())
	}

	n := b.cfg.starts
	progress("docker provider: start to ready, %d workspaces through the Go client", n)
	starts, err := timedStarts(ctx, n, func(i int) (time.Duration, error) {
		ws, took, err := b.t.createWorkspaceOn(ctx, fmt.Sprintf("start-docker-%d", i), "docker")
		if ws.ID != "" {
			if derr := b.t.deleteWorkspace(ctx, ws.ID); err == nil {
				err = derr
			}
		}
		return took, err
	})
	if err != nil {
		return fmt.Errorf("docker provider workspace start: %w", err)
	}
	runRef, runNote := b.ref("docker run --rm "+runnerImage+" true", false, func() (float64, error) {
		progress("docker provider: %d × `docker run --rm %s true`", n, runnerImage)
		s, err := timedStarts(ctx, n, func(int) (time.Duration, error) {
			return timed(func() error { return b.d.run(ctx, io.Discard, "run", "--rm", runnerImage, "true") })
		})
		return ms(summarize(s).P50), err
	})
	b.rep.add(result{Metric: fmt.Sprintf("Docker provider: start → ready, p50 of %d", n), Unit: unitMS,
		Tether: val(ms(summarize(starts).P50)), N: n, RefN: n,
		TetherTool: "Go client CreateWorkspace, provider docker, image " + runnerImage + " (container create, runner copied in, start, runner's hello)",
		Reference:  runRef, ReferenceTool: "`docker run --rm " + runnerImage + " true` (create, start, wait, remove; default bridge network)", Note: runNote})

	return b.dockerFiles(ctx)
}

// ensureRunnerImage builds tether-runner:dev with .ci/images when the host lacks it.
func (b *bench) ensureRunnerImage(ctx context.Context) error {
	if _, err := b.d.output(ctx, "image", "inspect", "--format", "{{.Id}}", runnerImage); err == nil {
		return nil
	}
	script, err := findUp(filepath.Join(".ci", "images"))
	if err != nil {
		return fmt.Errorf("%s missing and .ci/images not found: %v", runnerImage, err)
	}
	progress("docker provider: %s missing, building it with %s", runnerImage, script)
	cmd := exec.CommandContext(ctx, script, b.cfg.binDir, "runner")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s runner: %v: %s", script, b.cfg.binDir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// dockerFiles puts and gets a 256 MiB file through the runner of a Docker workspace, and with
// `docker cp` into and out of that workspace's container.
func (b *bench) dockerFiles(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "tether-bench-dfiles-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	mib := int64(dockerFileSize >> 20)
	progress("docker provider: generating a %d MiB file", mib)
	f, err := genFile(filepath.Join(dir, cpFile), dockerFileSize, 3)
	if err != nil {
		return fmt.Errorf("generate host file: %w", err)
	}
	ws, _, err := b.t.createWorkspaceOn(ctx, "bench-docker-files", "docker")
	if err != nil {
		return fmt.Errorf("create docker workspace: %w", err)
	}
	defer func() {
		if err := b.t.deleteWorkspace(context.WithoutCancel(ctx), ws.ID); err != nil {
			progress("delete workspace %s: %v", ws.ID, err)
		}
	}()
	ctr := "tether-" + ws.AllocationID // the provider's container name
	fw := fileWorkspace{t: b.t, id: ws.ID}
	n := b.cfg.rounds

	progress("docker provider: put %d × %d MiB through the Go client WriteFile", n, mib)
	put, err := timedRounds(ctx, n, f.size, func() (time.Duration, error) { return fw.put(ctx, f) })
	if err != nil {
		return fmt.Errorf("docker workspace file put: %w", err)
	}
	progress("docker provider: get %d × %d MiB through the Go client ReadFile", n, mib)
	get, err := timedRounds(ctx, n, f.size, func() (time.Duration, error) { return fw.get(ctx, f) })
	if err != nil {
		return fmt.Errorf("docker workspace file get: %w", err)
	}
	var cpPut, cpGet rates
	putRef, putNote := b.ref("docker cp into the container", false, func() (float64, error) {
		progress("docker provider: %d × `docker cp FILE %s:/workspace/`", n, ctr)
		cpPut, err = timedRounds(ctx, n, f.size, func() (time.Duration, error) { return b.cpIn(ctx, fw, ctr, f) })
		return median(cpPut.mibps), err
	})
	getRef, getNote := b.ref("docker cp out of the container", false, func() (float64, error) {
		progress("docker provider: %d × `docker cp %s:/workspace/%s -`", n, ctr, wsFile)
		cpGet, err = timedRounds(ctx, n, f.size, func() (time.Duration, error) { return b.cpOut(ctx, ctr, f) })
		return median(cpGet.mibps), err
	})
	for _, row := range []struct {
		op, tool, refTool string
		t, r              rates
		ref               *float64
		note              string
	}{
		{"put", "Go client WriteFile into the Docker workspace, returned SHA-256 checked",
			"`docker cp FILE CONTAINER:/workspace/`, same container, then sha256sum in it (untimed)", put, cpPut, putRef, putNote},
		{"get", "Go client ReadFile from the Docker workspace into a count+SHA-256 writer",
			"`docker cp CONTAINER:/workspace/FILE -`, tar stream parsed into a count+SHA-256 writer", get, cpGet, getRef, getNote},
	} {
		b.rep.add(result{Metric: fmt.Sprintf("Docker provider: %d MiB file %s through controller→runner, %s", mib, row.op, row.t.label()),
			Unit: unitMiBps, Tether: val(median(row.t.mibps)), TetherTool: row.tool, N: len(row.t.mibps),
			Reference: row.ref, ReferenceTool: row.refTool, RefN: len(row.r.mibps), Note: row.note})
	}
	b.rep.note("Docker provider rows: workspaces run in %s with the provider's defaults (a private network of each workspace's own, made and removed with it — start → ready includes making it —, the runner reaching the controller through its mounted socket, the runner as root with SETUID, SETGID, KILL and CHOWN only, the agent as uid 65532, memory/CPU/pids limits, an init process). `docker run --rm` includes removing the container; CreateWorkspace does not (workspaces are deleted untimed). WriteFile fsyncs before publishing; `docker cp` does not.", runnerImage)
	return nil
}

// cpIn times `docker cp FILE CONTAINER:/workspace/` and checks the copy's SHA-256 in the
// workspace (untimed).
func (b *bench) cpIn(ctx context.Context, fw fileWorkspace, ctr string, f hostFile) (time.Duration, error) {
	took, err := timed(func() error { return b.d.run(ctx, io.Discard, "cp", f.path, ctr+":/workspace/") })
	if err != nil {
		return 0, err
	}
	var out bytes.Buffer
	if err := fw.t.exec(ctx, fw.id, &out, "sha256sum", cpFile); err != nil {
		return 0, err
	}
	if got, _, _ := strings.Cut(out.String(), " "); got != f.sha {
		return 0, fmt.Errorf("%s in the container has sha256 %s, want %s", cpFile, got, f.sha)
	}
	return took, nil
}

// cpOut times `docker cp CONTAINER:/workspace/wsFile -`, reading the file out of the tar stream
// into a count+SHA-256 writer.
func (b *bench) cpOut(ctx context.Context, ctr string, f hostFile) (time.Duration, error) {
	w := newHashCounter()
	took, err := timed(func() error {
		cmd := exec.CommandContext(ctx, b.d.cli, "cp", ctr+":/workspace/"+wsFile, "-")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		tr := tar.NewReader(stdout)
		_, err = tr.Next()
		if err == nil {
			_, err = io.Copy(w, tr)
		}
		_, _ = io.Copy(io.Discard, stdout) // the tar trailer
		if werr := cmd.Wait(); werr != nil {
			return fmt.Errorf("docker cp: %v: %s", werr, strings.TrimSpace(stderr.String()))
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("docker cp tar stream: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if w.n != f.size || w.sum() != f.sha {
		return 0, fmt.Errorf("got %d bytes with sha256 %s, want %d bytes with sha256 %s", w.n, w.sum(), f.size, f.sha)
	}
	return took, nil
}
