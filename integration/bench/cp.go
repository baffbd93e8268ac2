package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// cpTrees measures `tether cp` of a source-like directory (genTree, -cp-mib) into and out of a
// Docker workspace beside `docker cp` of the same directory into and out of a plain container
// (the reference container), each a CLI process end to end. Every copy lands at a fresh path;
// each copy out is checked (bytes and files, untimed).
func (b *bench) cpTrees(ctx context.Context) error {
	skip := func(why string) error {
		progress("cp rows skipped: %s", why)
		b.rep.note("cp rows skipped: %s", why)
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
	dir, err := os.MkdirTemp("", "tether-bench-cp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	progress("cp: generating a %d MiB source-like tree", b.cfg.cpSize>>20)
	ti, err := genTree(ctx, src, b.cfg.cpSize)
	if err != nil {
		return fmt.Errorf("generate the cp tree: %w", err)
	}
	want, err := treeBytes(src)
	if err != nil {
		return err
	}
	ws, _, err := b.t.createWorkspaceOn(ctx, "bench-cp", "docker")
	if err != nil {
		return fmt.Errorf("create docker workspace: %w", err)
	}
	defer func() {
		if err := b.t.deleteWorkspace(context.WithoutCancel(ctx), ws.ID); err != nil {
			progress("delete workspace %s: %v", ws.ID, err)
		}
	}()
	n := b.cfg.rounds
	round := 0
	fresh := func(prefix string) string { round++; return fmt.Sprintf("%s-%d", prefix, round) }
	checkOut := func(p string) error {
		got, err := treeBytes(p)
		if err == nil && got != want {
			err = fmt.Errorf("%s holds %d bytes, the source %d", p, got, want)
		}
		return err
	}

	progress("cp: %d × `tether cp DIR %s:PATH`", n, ws.ID)
	in, err := timedRounds(ctx, n, want, func() (time.Duration, error) {
		return timed(func() error { return b.t.cli(ctx, io.Discard, "cp", src, ws.ID+":"+fresh("in")) })
	})
	if err != nil {
		return fmt.Errorf("tether cp in: %w", err)
	}
	progress("cp: %d × `tether cp %s:PATH DIR`", n, ws.ID)
	out, err := timedRounds(ctx, n, want, func() (time.Duration, error) {
		dst := filepath.Join(dir, fresh("out"))
		took, err := timed(func() error { return b.t.cli(ctx, io.Discard, "cp", ws.ID+":in-1", dst) })
		if err == nil {
			err = checkOut(dst)
		}
		os.RemoveAll(dst)
		return took, err
	})
	if err != nil {
		return fmt.Errorf("tether cp out: %w", err)
	}
	var refIn, refOut rates
	firstRef := ""
	inRef, inNote := b.ref("docker cp of a directory into a container", true, func() (float64, error) {
		progress("cp: %d × `docker cp DIR %s:/PATH`", n, b.ctr)
		refIn, err = timedRounds(ctx, n, want, func() (time.Duration, error) {
			name := fresh("ref")
			if firstRef == "" {
				firstRef = name
			}
			return timed(func() error { return b.d.run(ctx, io.Discard, "cp", src, b.ctr+":/"+name) })
		})
		return median(refIn.mibps), err
	})
	outRef, outNote := b.ref("docker cp of a directory out of a container", true, func() (float64, error) {
		if firstRef == "" {
			return 0, fmt.Errorf("no copy in the container to copy out")
		}
		progress("cp: %d × `docker cp %s:/PATH DIR`", n, b.ctr)
		refOut, err = timedRounds(ctx, n, want, func() (time.Duration, error) {
			dst := filepath.Join(dir, fresh("refout"))
			took, err := timed(func() error { return b.d.run(ctx, io.Discard, "cp", b.ctr+":/"+firstRef, dst) })
			if err == nil {
				err = checkOut(dst)
			}
			os.RemoveAll(dst)
			return took, err
		})
		return median(refOut.mibps), err
	})
	// kubectl cp is `tar cf - | kubectl exec -i POD -- tar xf -` (and the reverse): the same
	// with docker exec into the reference container.
	var tarIn, tarOut rates
	firstTar := ""
	sh := func(script string, args ...string) error {
		cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, "sh"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", script, err, out)
		}
		return nil
	}
	tarInRef, tarInNote := b.ref("tar | docker exec -i tar -x, kubectl cp's way in", true, func() (float64, error) {
		progress("cp: %d × `tar -c DIR | docker exec -i %s tar -x`", n, b.ctr)
		tarIn, err = timedRounds(ctx, n, want, func() (time.Duration, error) {
			name := fresh("tar")
			if firstTar == "" {
				firstTar = name
			}
			return timed(func() error {
				// The reference image's busybox has the applets but links only a few.
				return sh(`tar -C "$4" -cf - . | "$1" exec -i "$2" sh -c 'mkdir -p "/$0" && tar -xf - -C "/$0"' "$3"`, b.d.cli, b.ctr, name, src)
			})
		})
		return median(tarIn.mibps), err
	})
	tarOutRef, tarOutNote := b.ref("docker exec tar -c | tar -x, kubectl cp's way out", true, func() (float64, error) {
		if firstTar == "" {
			return 0, fmt.Errorf("no copy in the container to copy out")
		}
		progress("cp: %d × `docker exec %s tar -c | tar -x`", n, b.ctr)
		tarOut, err = timedRounds(ctx, n, want, func() (time.Duration, error) {
			dst := filepath.Join(dir, fresh("tarout"))
			if err := os.Mkdir(dst, 0o755); err != nil {
				return 0, err
			}
			took, err := timed(func() error {
				return sh(`"$1" exec "$2" sh -c 'tar -C "/$0" -cf - .' "$3" | tar -xf - -C "$4"`, b.d.cli, b.ctr, firstTar, dst)
			})
			if err == nil {
				err = checkOut(dst)
			}
			os.RemoveAll(dst)
			return took, err
		})
		return median(tarOut.mibps), err
	})
	mib := b.cfg.cpSize >> 20
	for _, row := range []struct {
		op, tool, refTool string
		t, r              rates
		ref               *float64
		note              string
	}{
		{"into", "`tether cp DIR WS:PATH` (tar through the controller into the runner's guard, staged and published whole)",
			"`docker cp DIR CONTAINER:/PATH`, plain container (" + benchImage + ")", in, refIn, inRef, inNote},
		{"out of", "`tether cp WS:PATH DIR` (runner's tar relayed and checked by the controller, extracted through the host-side guard, published whole)",
			"`docker cp CONTAINER:/PATH DIR`, same container", out, refOut, outRef, outNote},
		{"into", "`tether cp DIR WS:PATH`", "`tar -c DIR | docker exec -i CONTAINER tar -x -C /PATH` (what kubectl cp does), same container",
			in, tarIn, tarInRef, tarInNote},
		{"out of", "`tether cp WS:PATH DIR`", "`docker exec CONTAINER tar -c -C /PATH . | tar -x -C DIR` (kubectl cp's way out), same container",
			out, tarOut, tarOutRef, tarOutNote},
	} {
		b.rep.add(result{Metric: fmt.Sprintf("cp of a %d MiB source-like directory %s a Docker workspace, %s", mib, row.op, row.t.label()),
			Unit: unitMiBps, Tether: val(median(row.t.mibps)), TetherTool: row.tool, N: len(row.t.mibps),
			Reference: row.ref, ReferenceTool: row.refTool, RefN: len(row.r.mibps), Note: row.note})
	}
	b.rep.note("cp rows: the tree is %s. Each copy is a CLI process end to end; `tether cp` makes the staged tree durable (syncfs) before publishing it, on the workspace's side and on the host's; `docker cp` syncs nothing.", ti)
	return nil
}
