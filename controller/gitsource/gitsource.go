package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/protocol"
)

// stderrTail is how much of git's stderr (the end of it) an error message carries.
const stderrTail = 1024

// Repo is a managed bare clone of a project's source.
type Repo struct {
	Dir    string // the bare clone (absolute)
	Source string // where it is fetched from: a host path (made absolute) or a URL
	Git    string // git binary; "" means "git" from PATH
}

// Ensure returns the base clone of source at dir, cloning it first when dir does not exist yet.
//
// The clone is `git clone --bare --no-local`: objects travel through git's transport even for a
// path on this host, so the base clone never hard-links or shares files with the source (nor
// inherits its alternates), and what it receives is checked by index-pack. It is made in
// dir+".tmp-<random>" and renamed into place, so a crash never leaves a half clone at dir; such
// leftovers of dir (and dir+".deleting-<random>" ones of Remove) are removed here.
//
// A local source that does not exist or is not a Git repository is CodeInvalidArgument: the
// caller named a bad source and retrying will not help. A URL that cannot be reached is
// CodeUnavailable. (Once a project exists, Fetch and DefaultBranch report a vanished source as
// CodeUnavailable.) An existing dir that is not a bare repository is CodeCorrupt.
func Ensure(ctx context.Context, git, source, dir string) (*Repo, error) {
	if git == "" {
		git = "git"
	}
	if err := checkSource(source); err != nil {
		return nil, err
	}
	local := IsLocal(source)
	path := local && !strings.HasPrefix(source, "file://")
	if path {
		source, _ = filepath.Abs(source) // fails only when the working directory is gone
	}
	if dir == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "base clone directory is empty")
	}
	dir, _ = filepath.Abs(dir)
	r := &Repo{Dir: dir, Source: source, Git: git}
	parent := filepath.Dir(dir)
	if err := removeLeftovers(parent, filepath.Base(dir)); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dir); err == nil {
		return r, r.checkBare(ctx)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, protocol.Errorf(protocol.CodeInternal, "base clone %s: %v", dir, err)
	}
	if _, err := os.Stat(source); path && err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "source %s: %v", source, err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "base clone parent: %v", err)
	}
	tmp := dir + ".tmp-" + randHex()
	if _, err := r.run(ctx, nil, nil, false, "clone", "--bare", "--no-local", "--template=", "--quiet", "--", source, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		code := protocol.CodeUnavailable
		if local && stderrHas(err, "does not appear to be a git repository", "not a git repository",
			"does not exist", "dubious ownership") {
			code = protocol.CodeInvalidArgument
		}
		return nil, fail(code, "clone "+redact(source), err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, protocol.Errorf(protocol.CodeInternal, "base clone rename: %v", err)
	}
	if f, err := os.Open(parent); err == nil { // make the rename durable
		_ = f.Sync()
		_ = f.Close()
	}
	return r, nil
}

func (r *Repo) checkBare(ctx context.Context) error {
	if err := checkConfig(filepath.Join(r.Dir, "config")); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(r.Dir, "objects", "info", "alternates")); err == nil {
		// --no-local never makes one: objects it names could be anyone's.
		return protocol.Errorf(protocol.CodeCorrupt, "base clone %s borrows objects (objects/info/alternates), which the controller never sets up", r.Dir)
	}
	out, err := r.run(ctx, nil, nil, true, "rev-parse", "--is-bare-repository")
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		return fail(protocol.CodeCorrupt, r.Dir+" is not a bare git repository", err)
	}
	return nil
}

// cloneConfig is every key (section.key, remote.origin.* as remote.origin.key) that `git clone
// --bare` writes into a base clone's config on some filesystem or git version. The controller
// writes nothing else there.
var cloneConfig = map[string]bool{
	"core.repositoryformatversion": true, "core.filemode": true, "core.bare": true, "core.symlinks": true,
	"core.ignorecase": true, "core.precomposeunicode": true, "core.logallrefupdates": true,
	"remote.origin.url": true, "remote.origin.fetch": true,
	"extensions.objectformat": true, "extensions.refstorage": true,
}

// checkConfig refuses (CodeCorrupt) a base clone whose config holds anything but what a bare
// clone writes, in the plain form git writes it: no include, no url.*.insteadOf, no
// core.sshCommand or fsmonitor, no continued or otherwise unusual line. Git reads a repository's
// own config whatever the environment says, so this is what keeps a config someone else wrote
// (a worktree of an earlier Tether shared it with its workspace) from ever being obeyed.
func checkConfig(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return protocol.Errorf(protocol.CodeCorrupt, "base clone config: %v", err)
	}
	bad := func(line string) error {
		return protocol.Errorf(protocol.CodeCorrupt,
			"base clone config %s holds %q, which the controller never writes: it is not used (remove the base clone to have it cloned again)", path, line)
	}
	if len(b) > 64<<10 {
		return bad("more than 64 KiB")
	}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, "\\") || hasCtl(strings.ReplaceAll(line, "\t", " ")):
			return bad(line)
		case line[0] == '[':
			name, ok := strings.CutSuffix(line, "]")
			switch name = strings.ToLower(name[1:]); {
			case ok && (name == "core" || name == "extensions"):
				section = name
			case ok && name == `remote "origin"`:
				section = "remote.origin"
			default:
				return bad(line)
			}
			continue
		}
		key, _, _ := strings.Cut(line, "=")
		if key = strings.ToLower(strings.TrimSpace(key)); section == "" || !cloneConfig[section+"."+key] {
			return bad(line)
		}
	}
	return nil
}

// DefaultBranch is the source's HEAD branch (e.g. "main"), asked of the source itself.
func (r *Repo) DefaultBranch(ctx context.Context) (string, error) {
	out, err := r.run(ctx, nil, nil, true, "ls-remote", "--symref", "--", r.Source, "HEAD")
	if err != nil {
		return "", fail(protocol.CodeUnavailable, "ls-remote "+redact(r.Source), err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "ref: refs/heads/"); ok {
			if branch, name, ok := strings.Cut(rest, "\t"); ok && name == "HEAD" && branch != "" {
				return branch, nil
			}
		}
	}
	return "", protocol.Errorf(protocol.CodeNotFound, "source %s has no HEAD branch", redact(r.Source))
}

// Fetch force-updates the base clone's refs/heads/<ref> from the source's refs/heads/<ref> (the
// source is the truth, so a rewound branch is followed) and returns its commit. No other ref is
// touched. A missing ref is CodeNotFound, an unreachable source CodeUnavailable.
func (r *Repo) Fetch(ctx context.Context, ref string) (string, error) {
	ref = strings.TrimPrefix(ref, "refs/heads/")
	return r.fetchInto(ctx, ref, "refs/heads/"+ref)
}

// IncomingPrefix holds the source's branches fetched as start points (FetchIncoming), apart from
// the base clone's own branches, which may carry workspaces' commits.
const IncomingPrefix = "refs/tether/incoming/"

// FetchIncoming fetches the source's branch into IncomingPrefix+branch, leaving refs/heads alone,
// and returns its commit (errors as Fetch's). The ref keeps the commit's objects in the base
// clone for later packs.
func (r *Repo) FetchIncoming(ctx context.Context, branch string) (string, error) {
	return r.fetchInto(ctx, branch, IncomingPrefix+branch)
}

func (r *Repo) fetchInto(ctx context.Context, branch, dst string) (string, error) {
	if err := CheckBranch(branch); err != nil {
		return "", err
	}
	_, err := r.run(ctx, nil, nil, true, "fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
		"--", r.Source, "+refs/heads/"+branch+":"+dst)
	switch {
	case err == nil:
	case stderrHas(err, "couldn't find remote ref"):
		return "", protocol.Errorf(protocol.CodeNotFound, "source %s has no branch %q", redact(r.Source), branch)
	case isLockErr(err):
		return "", fail(protocol.CodeGitBusy, "fetch "+branch, err)
	default:
		return "", fail(protocol.CodeUnavailable, "fetch "+branch+" from "+redact(r.Source), err)
	}
	id, ok, err := r.revParse(ctx, dst)
	if err == nil && !ok {
		err = protocol.Errorf(protocol.CodeInternal, "fetched %s but it does not resolve", dst)
	}
	return id, err
}

// Resolve returns the full commit id rev names, or CodeNotFound. A plain branch name means
// refs/heads/<rev> first, even when a tag of the same name exists (base refs are branches).
func (r *Repo) Resolve(ctx context.Context, rev string) (string, error) {
	if err := checkRev(rev); err != nil {
		return "", err
	}
	if !isHex(rev) && !strings.HasPrefix(rev, "refs/") && CheckBranch(rev) == nil {
		if id, ok, err := r.revParse(ctx, "refs/heads/"+rev); err != nil || ok {
			return id, err
		}
	}
	id, ok, err := r.revParse(ctx, rev)
	if err == nil && !ok {
		err = protocol.Errorf(protocol.CodeNotFound, "no commit %q in the base clone", rev)
	}
	return id, err
}

func (r *Repo) revParse(ctx context.Context, rev string) (string, bool, error) {
	out, err := r.run(ctx, nil, nil, true, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err == nil {
		return strings.TrimSpace(string(out)), true, nil
	}
	if exitCode(err) == 1 {
		return "", false, nil
	}
	return "", false, fail(protocol.CodeInternal, "rev-parse "+rev, err)
}

// HasCommit reports whether the base clone holds commit.
func (r *Repo) HasCommit(ctx context.Context, commit string) bool {
	ok, _ := r.hasCommit(ctx, commit)
	return ok
}

// hasCommit tells "git said no" (false, nil) from "git did not answer" (context, git missing).
func (r *Repo) hasCommit(ctx context.Context, commit string) (bool, error) {
	if err := checkRev(commit); err != nil {
		return false, err
	}
	_, err := r.run(ctx, nil, nil, true, "cat-file", "-e", commit+"^{commit}")
	if _, said := err.(*gitError); said {
		return false, nil
	}
	return err == nil, err
}

// IsAncestor reports whether commit is reachable from ref. A commit the base clone does not hold
// is not reachable (false, nil); a ref it does not hold is CodeNotFound.
func (r *Repo) IsAncestor(ctx context.Context, commit, ref string) (bool, error) {
	if ok, err := r.hasCommit(ctx, commit); !ok {
		return false, err
	}
	target, err := r.Resolve(ctx, ref)
	if err != nil {
		return false, err
	}
	_, err = r.run(ctx, nil, nil, true, "merge-base", "--is-ancestor", commit, target)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	}
	return false, fail(protocol.CodeInternal, "merge-base", err)
}

// Pack streams to w a pack (not thin: it stands alone) of every object reachable from want and
// not from have. An unknown want is CodeNotFound; unknown haves (commits only the receiver has)
// are skipped. The pack is never held in memory. An error from w is returned as is.
func (r *Repo) Pack(ctx context.Context, w io.Writer, want []string, have []string) error {
	if len(want) == 0 {
		return protocol.Errorf(protocol.CodeInvalidArgument, "pack: nothing wanted")
	}
	names := append(append([]string(nil), want...), have...)
	for _, n := range names {
		if err := checkRev(n); err != nil {
			return err
		}
	}
	out, err := r.run(ctx, strings.NewReader(strings.Join(names, "\n")+"\n"), nil, true, "cat-file", "--batch-check=%(objectname) %(objecttype)")
	if err != nil {
		return fail(protocol.CodeInternal, "cat-file", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		return protocol.Errorf(protocol.CodeInternal, "cat-file: %d answers for %d names", len(lines), len(names))
	}
	var revs strings.Builder
	for i, line := range lines {
		f := strings.Fields(line)
		known := len(f) == 2 && f[1] != "missing" && f[1] != "ambiguous"
		switch {
		case i < len(want) && !known:
			return protocol.Errorf(protocol.CodeNotFound, "pack: no object %q in the base clone", names[i])
		case i < len(want):
			revs.WriteString(f[0] + "\n")
		case known:
			revs.WriteString("^" + f[0] + "\n")
		}
	}
	ew := &errWriter{w: w}
	_, err = r.run(ctx, strings.NewReader(revs.String()), ew, true, "pack-objects", "--revs", "--stdout", "--delta-base-offset", "-q")
	if ew.err != nil {
		return fmt.Errorf("pack: %w", ew.err)
	}
	if err != nil {
		return fail(protocol.CodeInternal, "pack-objects", err)
	}
	return nil
}

// DeleteBranch deletes refs/heads/<branch> (`git branch -D`). A missing branch is not an error.
func (r *Repo) DeleteBranch(ctx context.Context, branch string) error {
	branch = strings.TrimPrefix(branch, "refs/heads/")
	if err := CheckBranch(branch); err != nil {
		return err
	}
	_, err := r.run(ctx, nil, nil, true, "branch", "-D", "--", branch)
	if err == nil {
		return nil
	}
	if _, ok, perr := r.revParse(ctx, "refs/heads/"+branch); perr == nil && !ok {
		return nil
	}
	code := protocol.CodeInternal
	if isLockErr(err) {
		code = protocol.CodeGitBusy
	}
	return fail(code, "delete branch "+branch, err)
}

// Size is the apparent size in bytes of everything under Dir (lstat sizes of all non-directories).
func (r *Repo) Size() (int64, error) {
	var n int64
	err := filepath.WalkDir(r.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			var info fs.FileInfo
			if info, err = d.Info(); err == nil {
				n += info.Size()
			}
		}
		if errors.Is(err, fs.ErrNotExist) { // removed by a concurrent gc
			return nil
		}
		return err
	})
	if err != nil {
		return 0, protocol.Errorf(protocol.CodeInternal, "size of %s: %v", r.Dir, err)
	}
	return n, nil
}
