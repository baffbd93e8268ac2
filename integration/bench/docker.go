package main

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	benchImage = "tether-bench-busybox:latest"
	benchLabel = "tether-bench"
)

// busyboxApplets get a symlink in the reference image.
var busyboxApplets = []string{"sh", "true", "head", "cat", "sleep", "ls", "wc", "yes"}

// dockerEnv is the reference: a real dockerd, through its CLI and its Engine API.
type dockerEnv struct {
	cli     string     // docker CLI path
	api     *engineAPI // nil when the Engine API is not reachable; its rows become n/a
	apiErr  error
	version string

	mu         sync.Mutex
	seq        int
	containers []string // ids to remove at close
}

// newDocker checks that a daemon answers and builds the reference image FROM scratch with the
// host's static busybox: nothing is pulled.
func newDocker(ctx context.Context) (*dockerEnv, error) {
	cli, err := exec.LookPath("docker")
	if err != nil {
		return nil, fmt.Errorf("no docker CLI on PATH")
	}
	d := &dockerEnv{cli: cli}
	out, err := d.output(ctx, "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return nil, fmt.Errorf("docker daemon not reachable: %v", err)
	}
	d.version = strings.TrimSpace(out)
	d.api, d.apiErr = newEngineAPI(ctx)
	if err := d.buildImage(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *dockerEnv) buildImage(ctx context.Context) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		bb = "/bin/busybox"
	}
	if err := checkStatic(bb); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tether-bench-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	binDir := filepath.Join(dir, "rootfs", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	if err := copyFile(bb, filepath.Join(binDir, "busybox"), 0o755); err != nil {
		return err
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(binDir, a)); err != nil {
			return err
		}
	}
	dockerfile := "FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD [\"/bin/sh\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	if _, err := d.output(ctx, "build", "-q", "-t", benchImage, dir); err != nil {
		return fmt.Errorf("build %s: %v", benchImage, err)
	}
	return nil
}

// checkStatic refuses a dynamically linked binary: a FROM scratch image has no loader.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install busybox-static (.ci/deps does)", path)
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// run runs the docker CLI with stdout to w.
func (d *dockerEnv) run(ctx context.Context, w io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, d.cli, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func (d *dockerEnv) output(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	err := d.run(ctx, &out, args...)
	return out.String(), err
}

func (d *dockerEnv) name() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return fmt.Sprintf("tether-bench-%d-%d", os.Getpid(), d.seq)
}

func (d *dockerEnv) track(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.containers = append(d.containers, id)
}

// runCLI times `docker run -d --network none IMAGE sleep 3600`, which returns once the container
// runs.
func (d *dockerEnv) runCLI(ctx context.Context) (string, time.Duration, error) {
	name := d.name()
	d.track(name) // removable by name even if the id never comes back
	start := time.Now()
	out, err := d.output(ctx, "run", "-d", "--network", "none", "--label", benchLabel+"=1", "--name", name, benchImage, "sleep", "3600")
	took := time.Since(start)
	if err != nil {
		return "", 0, err
	}
	return strings.TrimSpace(out), took, nil
}

// runAPI times create+start through the Engine API.
func (d *dockerEnv) runAPI(ctx context.Context) (string, time.Duration, error) {
	name := d.name()
	d.track(name)
	start := time.Now()
	id, err := d.api.run(ctx, name, benchImage, []string{"sleep", "3600"})
	return id, time.Since(start), err
}

// execCLI runs `docker exec ID ARGV...` with stdout to w.
func (d *dockerEnv) execCLI(ctx context.Context, id string, w io.Writer, argv ...string) error {
	return d.run(ctx, w, append([]string{"exec", id}, argv...)...)
}

// remove force-removes a container (by id or name).
func (d *dockerEnv) remove(ctx context.Context, ref string) error {
	if d.api != nil {
		return d.api.remove(ctx, ref)
	}
	return d.run(ctx, io.Discard, "rm", "-f", ref)
}

// removeNow removes a container and forgets it; errors only print.
func (d *dockerEnv) removeNow(ctx context.Context, ref, name string) {
	if err := d.remove(ctx, ref); err != nil {
		progress("remove container %s: %v", ref, err)
		return
	}
	d.mu.Lock()
	d.containers = removeString(removeString(d.containers, ref), name)
	d.mu.Unlock()
}

// shimPID is the containerd shim serving a container: the parent of the container's init.
func (d *dockerEnv) shimPID(ctx context.Context, id string) (int, error) {
	var pid int
	var err error
	if d.api != nil {
		pid, err = d.api.pid(ctx, id)
	} else {
		var out string
		out, err = d.output(ctx, "inspect", "-f", "{{.State.Pid}}", id)
		if err == nil {
			_, err = fmt.Sscan(out, &pid)
		}
	}
	if err != nil {
		return 0, err
	}
	ppid, err := parentPID(pid)
	if err != nil {
		return 0, err
	}
	if c := procComm(ppid); !strings.HasPrefix(c, "containerd-shim") {
		return 0, fmt.Errorf("parent of container init %d is %q, not a containerd shim", pid, c)
	}
	return ppid, nil
}

// shimBinary is the per-container agent's executable.
func shimBinary() (string, error) {
	for _, name := range []string{"containerd-shim-runc-v2", "containerd-shim"} {
		if p, err := exec.LookPath(name); err == nil {
			return filepath.EvalSymlinks(p)
		}
	}
	return "", fmt.Errorf("no containerd-shim-runc-v2 on PATH")
}

// close removes every container this run created.
func (d *dockerEnv) close() {
	d.mu.Lock()
	refs := d.containers
	d.containers = nil
	d.mu.Unlock()
	for _, ref := range refs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := d.remove(ctx, ref); err != nil && !strings.Contains(err.Error(), "No such container") {
			progress("remove container %s: %v", ref, err)
		}
		cancel()
	}
}
