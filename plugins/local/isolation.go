package local

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// Isolation values of the local provider's `isolation` option.
const (
	isolationNamespaces = protocol.IsolationNamespaces
	isolationNone       = protocol.IsolationNone
)

// sandboxDirName holds, beside the workspace root, what the runner's sandbox init needs: the
// agent's tmp/ and home/, and mnt/, the empty mount point of each command's new root.
const sandboxDirName = "sandbox"

// Host ids for agents of a root controller: 2^30 upwards, one per allocation (hashed from its
// id), far above any uid a distribution hands out and never root. Two allocations that hash to
// the same id still see nothing of each other: each command has its own mount and pid
// namespaces.
const (
	agentIDBase  = 1 << 30
	agentIDRange = 1 << 24
)

// agentHostID is the unprivileged host uid (and gid) an allocation's agent runs as when the
// provider is root; -1 otherwise, where the agent maps to the controller's own user, the only
// one an unprivileged user namespace may map.
func agentHostID(allocation string) int {
	if os.Geteuid() != 0 {
		return -1
	}
	h := fnv.New32a()
	h.Write([]byte(allocation))
	return agentIDBase + int(h.Sum32()%agentIDRange)
}

// prepareSandbox makes the sandbox directories and gives the agent what is the agent's.
func prepareSandbox(dir string, agentID int) error {
	sb := filepath.Join(dir, sandboxDirName)
	for _, d := range []string{sb, filepath.Join(sb, "mnt"), filepath.Join(sb, "tmp"), filepath.Join(sb, "home")} {
		if err := mkdirPrivate(d); err != nil {
			return err
		}
	}
	if agentID < 0 {
		return nil
	}
	for _, d := range []string{filepath.Join(dir, rootDirName), filepath.Join(sb, "tmp"), filepath.Join(sb, "home")} {
		if err := os.Lchown(d, agentID, agentID); err != nil {
			return provider.Errorf(provider.CodeProviderFailed, "give %s to the agent's uid %d: %v", d, agentID, err)
		}
	}
	return nil
}

// probeIsolation proves the kernel gives the runner the namespaces it needs, by having the
// runner binary run itself confined, before anything is handed out: a kernel (or a container
// runtime's seccomp profile) that refuses them fails the create, never a silent downgrade.
func probeIsolation(ctx context.Context, dir, runner string, agentID int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, runner, protocol.ConfineProbeArg)
	cmd.Dir = "/"
	cmd.Env = []string{
		"PATH=" + defaultPath,
		protocol.EnvIsolation + "=" + isolationNamespaces,
		protocol.EnvWorkspaceRoot + "=" + filepath.Join(dir, rootDirName),
		protocol.EnvSandboxDir + "=" + filepath.Join(dir, sandboxDirName),
	}
	if agentID >= 0 {
		cmd.Env = append(cmd.Env, protocol.EnvAgentUID+"="+strconv.Itoa(agentID), protocol.EnvAgentGID+"="+strconv.Itoa(agentID))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return provider.Errorf(provider.CodeProviderFailed,
			"this host refused the sandbox's user, mount, pid, ipc and uts namespaces (%v: %s); "+
				"--provider-opt isolation=none runs the workspace without any isolation", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// isolationEnv is what the runner needs to confine the agent.
func isolationEnv(dir string, m marker) map[string]string {
	if m.Isolation != isolationNamespaces {
		return map[string]string{protocol.EnvIsolation: isolationNone}
	}
	env := map[string]string{
		protocol.EnvIsolation:  isolationNamespaces,
		protocol.EnvSandboxDir: filepath.Join(dir, sandboxDirName),
	}
	if m.AgentID >= 0 {
		env[protocol.EnvAgentUID] = strconv.Itoa(m.AgentID)
		env[protocol.EnvAgentGID] = strconv.Itoa(m.AgentID)
	}
	return env
}

// isolationInfo is what the allocation reports of its isolation.
func isolationInfo(m marker) map[string]string {
	info := map[string]string{"isolation": m.Isolation}
	if m.Isolation == isolationNamespaces {
		uid := strconv.Itoa(os.Getuid())
		if m.AgentID >= 0 {
			uid = strconv.Itoa(m.AgentID)
		}
		info["agent_uid"] = uid
	}
	return info
}

// probeCache remembers which runner binaries proved they can confine on this host: what the
// kernel allows does not change between creates, so the probe (a confined run of the runner,
// tens of milliseconds) is paid once per binary and provider process, not per workspace. A
// binary replaced on disk (another inode, size or mtime) is probed again; a failure is never
// remembered.
type probeCache struct {
	mu     sync.Mutex
	proved map[string]bool
}

func (c *probeCache) check(ctx context.Context, dir, runner string, agentID int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(runner, &st); err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "runner binary: %v", err)
	}
	key := fmt.Sprintf("%s\x00%d:%d:%d:%d:%v", runner, st.Dev, st.Ino, st.Size, st.Mtim.Nano(), agentID < 0)
	c.mu.Lock()
	ok := c.proved[key]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := probeIsolation(ctx, dir, runner, agentID); err != nil {
		return err
	}
	c.mu.Lock()
	if c.proved == nil {
		c.proved = map[string]bool{}
	}
	c.proved[key] = true
	c.mu.Unlock()
	return nil
}
