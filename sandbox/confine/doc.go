// Package confine starts the agent's commands apart from the runner that starts them. The
// runner is trusted by the controller; the agent is not, so it must never share the runner's
// uid, see its process, read its memory or reach the host's files.
//
// Two layouts (protocol.Isolation*):
//
//   - uid: the sandbox (a container) is already the boundary to the host. The runner is the
//     sandbox's root with a few capabilities; agent commands run as an unprivileged uid with
//     none.
//   - namespaces: the local provider, where the sandbox is the host itself. Every command runs
//     under an init of its own (the runner binary re-executed, see Init) in new mount, pid, ipc
//     and uts namespaces — and a user namespace when the runner is not root — which shows it the
//     workspace at /workspace, read-only system directories, a private /tmp and HOME, and
//     nothing else; the command itself runs in a further user namespace as uid 1000 without
//     capabilities, mapped to an unprivileged host uid when the runner is root.
package confine
