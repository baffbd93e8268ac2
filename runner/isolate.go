package runner

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/confine"
	"github.com/tetherhq/tether/sandbox/process"
	"golang.org/x/sys/unix"
)

// agentIDs are the host ids the agent's processes have: the policy's when the runner is root and
// confines, the runner's own otherwise (an unprivileged runner maps its agent to itself).
func (r *Runner) agentIDs() (uid, gid int) {
	if r.policy.Active() && os.Geteuid() == 0 {
		return r.policy.UID, r.policy.GID
	}
	return os.Getuid(), os.Getgid()
}

// Confine implements process.Confiner for every command the runner starts.
func (r *Runner) Confine(cmd *exec.Cmd, workDir string) (process.Confined, error) {
	return r.policy.Confine(cmd, workDir)
}

// isolate puts the runner out of the agent's reach before it serves anything: not dumpable
// (its memory, environment and descriptors are unreadable, it cannot be ptraced), the workspace
// the agent's, and — when the runner is root — its own file access no wider than the agent's.
// A runner that was asked to confine and cannot refuses to run: serving unconfined would be
// a silent downgrade.
func (r *Runner) isolate(agentSocket string) error {
	if r.policy.Mode == protocol.IsolationNamespaces {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("isolate: find the runner binary: %w", err)
		}
		r.policy.Workspace, r.policy.AgentSocket, r.policy.Self = r.cfg.Root, agentSocket, self
	}
	// Checked whatever the mode: a misspelt one is refused, never taken for "none".
	if err := r.policy.Check(); err != nil {
		return err
	}
	if !r.policy.Active() {
		return nil
	}
	if err := confine.HideRunner(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid := r.agentIDs()
	// The workspace root belongs to the agent; what the runner writes in it from now on is created
	// with the agent's file ids, so everything in it is the agent's.
	fd, err := unix.Open(r.cfg.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("isolate: open workspace root: %w", err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		unix.Close(fd)
		return fmt.Errorf("isolate: give the workspace root to the agent: %w", err)
	}
	// Past this point the runner may no longer be able to walk to its root by name (a provider's
	// private directories are root's): it reaches it through this descriptor, kept for its life.
	r.root = fmt.Sprintf("/proc/self/fd/%d", fd)
	// The capture cache is written with the same file ids; the agent never sees the directory
	// (it lies outside every view a confined command gets).
	if r.cfg.StateDir != "" {
		if err := os.Chown(r.cfg.StateDir, uid, gid); err != nil {
			return fmt.Errorf("isolate: hand the state directory to the runner's file ids: %w", err)
		}
	}
	return confine.ActAsAgentOnFiles(uid, gid)
}
