package daytona

import (
	"context"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// stateMap maps every SandboxState of the spec to what Inspect reports (a
// test reads the enum from testdata/api.json, so a state Daytona adds
// fails it until it is mapped here).
//
//   - started is running.
//   - On the way to started, or busy with an operation the runner cannot
//     be used through (creating, starting, restoring, resuming, building,
//     pulling, resizing, snapshotting, forking) or not known to Daytona
//     itself (unknown): creating, i.e. not usable yet.
//   - stopped, stopping, paused and pausing keep the sandbox and its files
//     and run no runner; error and build_failed too (Daytona keeps the
//     sandbox; Start or Destroy decide).
//   - archived and archiving: archived (Start restores).
//   - destroyed and destroying: gone.
var stateMap = map[string]provider.State{
	StateStarted: provider.StateRunning,

	StateCreating:         provider.StateCreating,
	StateStarting:         provider.StateCreating,
	StateRestoring:        provider.StateCreating,
	StateResuming:         provider.StateCreating,
	StatePendingBuild:     provider.StateCreating,
	StateBuildingSnapshot: provider.StateCreating,
	StatePullingSnapshot:  provider.StateCreating,
	StateResizing:         provider.StateCreating,
	StateSnapshotting:     provider.StateCreating,
	StateForking:          provider.StateCreating,
	StateUnknown:          provider.StateCreating,

	StateStopped:     provider.StateStopped,
	StateStopping:    provider.StateStopped,
	StatePaused:      provider.StateStopped,
	StatePausing:     provider.StateStopped,
	StateError:       provider.StateStopped,
	StateBuildFailed: provider.StateStopped,

	StateArchived:  provider.StateArchived,
	StateArchiving: provider.StateArchived,

	StateDestroyed:  provider.StateGone,
	StateDestroying: provider.StateGone,
}

// MapState is what Inspect reports for a Daytona state; ok is false for a
// state the spec does not name (reported as creating).
func MapState(s string) (provider.State, bool) {
	st, ok := stateMap[s]
	if !ok {
		return provider.StateCreating, false
	}
	return st, true
}

// failed states end a wait for started or stopped.
func failed(s string) bool {
	return s == StateError || s == StateBuildFailed || s == StateDestroyed || s == StateDestroying
}

// retained reports whether a sandbox in state s keeps its files with no
// process running: what a stop must confirm.
func retained(s string) bool { return s == StateStopped || s == StateArchived }

// waitFor polls the sandbox, 100 ms growing to 1 s as the official SDKs
// do, until done says so or timeout passes.
func waitFor(ctx context.Context, cli *Client, id, want string, timeout time.Duration, done func(string) bool) (Sandbox, error) {
	deadline := time.Now().Add(timeout)
	var b backoff
	for {
		sb, err := cli.Get(ctx, id)
		if err != nil {
			return sb, typed("get sandbox "+id, err)
		}
		if done(sb.State) {
			return sb, nil
		}
		if failed(sb.State) {
			return sb, provider.Errorf(provider.CodeProviderFailed, "sandbox %s is %s, not %s: %s", id, sb.State, want, sb.ErrorReason)
		}
		if time.Now().After(deadline) {
			return sb, provider.Errorf(provider.CodeProviderFailed, "sandbox %s did not become %s within %s (state %s)", id, want, timeout, sb.State)
		}
		if err := sleep(ctx, b.next()); err != nil {
			return sb, err
		}
	}
}

// waitStarted waits through creating, pending builds, starting and
// restoring (an archive can take minutes: the start_timeout option).
func waitStarted(ctx context.Context, cli *Client, id string, timeout time.Duration) (Sandbox, error) {
	return waitFor(ctx, cli, id, StateStarted, timeout, func(s string) bool { return s == StateStarted })
}

// waitStopped waits until the sandbox is stopped or archived.
func waitStopped(ctx context.Context, cli *Client, id string, timeout time.Duration) (Sandbox, error) {
	return waitFor(ctx, cli, id, StateStopped, timeout, retained)
}
