package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// systemDirs are shown read-only (or, where the host has a symlink, as the same symlink).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// etcSecrets are hidden behind an empty file even where the agent could not read them anyway.
var etcSecrets = []string{"shadow", "shadow-", "gshadow", "gshadow-", "security/opasswd"}

// devices are bound from the host's /dev into the sandbox's own.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

const passwd = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
const group = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n"

// buildRoot makes a tmpfs the new root, fills it with the sandbox's view and pivots into it;
// the host's root is detached, so no path leads back to it.
func buildRoot(spec initSpec) error {
	// Nothing mounted here may propagate back to the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := filepath.Join(spec.StateDir, "mnt")
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	for _, d := range systemDirs {
		if err := showSystem(root, d); err != nil {
			return err
		}
	}
	if err := writeFile(root, "/run/tether/empty", "", 0o444); err != nil {
		return err
	}
	for _, s := range etcSecrets {
		host := filepath.Join("/etc", s)
		if _, err := os.Lstat(host); err == nil {
			if err := bind(filepath.Join(root, "run/tether/empty"), filepath.Join(root, host), true); err != nil {
				return err
			}
		}
	}
	// Identities of the sandbox, not the host's users.
	for name, content := range map[string]string{"passwd": passwd, "group": group} {
		if err := writeFile(root, "/run/tether/"+name, content, 0o444); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(root, "etc", name)); err == nil {
			if err := bind(filepath.Join(root, "run/tether", name), filepath.Join(root, "etc", name), true); err != nil {
				return err
			}
		}
	}
	rw := []struct{ host, inside string }{
		{spec.Workspace, WorkspaceDir},
		{filepath.Join(spec.StateDir, "tmp"), "/tmp"},
		{filepath.Join(spec.StateDir, "home"), HomeDir},
	}
	if spec.AgentSocket != "" {
		rw = append(rw, struct{ host, inside string }{filepath.Dir(spec.AgentSocket), socketDir})
	}
	for _, m := range rw {
		if err := mkdirIn(root, m.inside); err != nil {
			return err
		}
		if err := bind(m.host, filepath.Join(root, m.inside), false); err != nil {
			return err
		}
	}
	if err := writeFile(root, toolDir+"/tether-runner", "", 0o555); err != nil {
		return err
	}
	if err := bind(spec.Self, filepath.Join(root, toolDir, "tether-runner"), true); err != nil {
		return err
	}
	if err := buildDev(root); err != nil {
		return err
	}
	if err := mkdirIn(root, "/proc"); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return pivot(root)
}

// showSystem shows the host's system directory d read-only, or its symlink as a symlink.
func showSystem(root, d string) error {
	fi, err := os.Lstat(d)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(d)
		if err != nil {
			return err
		}
		return os.Symlink(target, filepath.Join(root, d))
	}
	if !fi.IsDir() {
		return nil
	}
	if err := mkdirIn(root, d); err != nil {
		return err
	}
	return bind(d, filepath.Join(root, d), true)
}

// buildDev gives the sandbox a /dev of its own: a few harmless devices, a private devpts and
// shm, no disks.
func buildDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := mkdirIn(root, "/dev"); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range devices {
		if _, err := os.Stat("/dev/" + d); err != nil {
			continue
		}
		if err := writeFile(root, "/dev/"+d, "", 0o666); err != nil {
			return err
		}
		if err := bind("/dev/"+d, filepath.Join(dev, d), false); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(dev, "pts"), 0o755); err != nil {
		return err
	}
	// A pseudo-terminal needs a devpts of its own; a kernel that refuses one leaves /dev/pts empty.
	_ = unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
	if err := os.Mkdir(filepath.Join(dev, "shm"), 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// pivot makes root the root and detaches the host's, then freezes the new root's own tmpfs.
func pivot(root string) error {
	old := filepath.Join(root, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make / read-only: %w", err)
	}
	return nil
}

// bind mounts src at dst, never with setuid files. A read-only bind is remounted
// keeping the flags the source mount already has: a user namespace may not drop those.
func bind(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dst, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	// Device files only where they are bound on purpose, from the host's /dev.
	if !strings.HasPrefix(src, "/dev/") {
		flags |= unix.MS_NODEV
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

func mkdirIn(root, p string) error {
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	return nil
}

func writeFile(root, p, content string, mode os.FileMode) error {
	if err := mkdirIn(root, filepath.Dir(p)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, p), []byte(content), mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}
