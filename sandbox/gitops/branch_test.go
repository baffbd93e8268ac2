package gitops

import (
	"context"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// SwitchBranch puts HEAD on a new branch at the same commit, leaving staged, unstaged and
// untracked work as it was (checked with the git CLI); an existing branch or a bad name is
// refused and nothing changes.
func TestSwitchBranch(t *testing.T) {
	_, root, base := cloned(t)
	write(t, root, "keep.txt", "changed, unstaged\n")
	write(t, root, "staged.txt", "staged\n")
	run(t, root, "add", "staged.txt")
	write(t, root, "untracked.txt", "untracked\n")
	before := run(t, root, "status", "--porcelain")

	st, err := SwitchBranch(context.Background(), root, protocol.GitBranchArgs{Branch: "tether/fork-1"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Branch != "tether/fork-1" || st.Head != base || st.Staged != 1 || st.Unstaged != 1 || st.Untracked != 1 {
		t.Fatalf("status after the switch: %+v; want tether/fork-1 at %s with 1 staged, 1 unstaged, 1 untracked", st, base)
	}
	if got := strings.TrimSpace(run(t, root, "symbolic-ref", "HEAD")); got != "refs/heads/tether/fork-1" {
		t.Fatalf("git symbolic-ref HEAD = %q", got)
	}
	if got := strings.TrimSpace(run(t, root, "rev-parse", "tether/fork-1")); got != base {
		t.Fatalf("the branch is at %s; want %s", got, base)
	}
	if after := run(t, root, "status", "--porcelain"); after != before {
		t.Fatalf("git status changed:\n%s\nwas\n%s", after, before)
	}
	if got := strings.TrimSpace(run(t, root, "rev-parse", "ws")); got != base {
		t.Fatalf("the old branch moved: %s", got)
	}

	_, err = SwitchBranch(context.Background(), root, protocol.GitBranchArgs{Branch: "ws"})
	wantCode(t, err, protocol.CodeConflict)
	_, err = SwitchBranch(context.Background(), root, protocol.GitBranchArgs{Branch: "a..b"})
	wantCode(t, err, protocol.CodeInvalidArgument)
	if got := strings.TrimSpace(run(t, root, "symbolic-ref", "HEAD")); got != "refs/heads/tether/fork-1" {
		t.Fatalf("a refused switch moved HEAD to %q", got)
	}
}
