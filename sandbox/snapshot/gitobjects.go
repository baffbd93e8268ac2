package snapshot

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"sort"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fmtconfig "github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/klauspost/compress/zlib"
)

// root is an object to keep. blob roots are only checked to exist;
// optional ones are skipped when missing (a pseudo-ref or cache entry may
// name an object that was pruned long ago).
type root struct {
	h        plumbing.Hash
	blob     bool
	optional bool
}

// maxConfigSize bounds the config files read into memory.
const maxConfigSize = 1 << 20

// readSmall reads a whole small file of fsys; nil, nil when absent.
func readSmall(fsys billy.Filesystem, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err == nil && len(b) > maxConfigSize {
		err = fmt.Errorf("%s is larger than %d bytes", name, maxConfigSize)
	}
	return b, err
}

// config rewrites the common config for a standalone, non-bare repository:
// no core.worktree, core.bare false, and per-worktree settings
// (config.worktree) merged in place of extensions.worktreeConfig.
func (n *normalizer) config() ([]byte, error) {
	raw, err := readSmall(n.r.Common, "config")
	if err != nil {
		return nil, fmt.Errorf("read git config: %w", err)
	}
	cfg := fmtconfig.New()
	if err := fmtconfig.NewDecoder(bytes.NewReader(raw)).Decode(cfg); err != nil {
		return nil, newError(CodeUnsupported, ".git/config", "cannot parse the Git config", err)
	}
	ext := cfg.Section("extensions")
	if rs := ext.Option("refstorage"); rs != "" && !strings.EqualFold(rs, "files") {
		return nil, newError(CodeUnsupported, ".git/config", "ref storage "+rs+" cannot be normalized", nil)
	}
	core := cfg.Section("core")
	core.RemoveOption("worktree")
	core.SetOption("bare", "false")
	if ext.HasOption("worktreeconfig") {
		ext.RemoveOption("worktreeconfig")
		wraw, err := readSmall(n.r.GitDir, "config.worktree")
		if err != nil {
			return nil, fmt.Errorf("read git config.worktree: %w", err)
		}
		wcfg := fmtconfig.New()
		if err := fmtconfig.NewDecoder(bytes.NewReader(wraw)).Decode(wcfg); err != nil {
			return nil, newError(CodeUnsupported, ".git/config.worktree", "cannot parse the Git config", err)
		}
		for _, s := range wcfg.Sections {
			for _, o := range s.Options {
				cfg.AddOption(s.Name, "", o.Key, o.Value)
			}
			for _, ss := range s.Subsections {
				for _, o := range ss.Options {
					cfg.AddOption(s.Name, ss.Name, o.Key, o.Value)
				}
			}
		}
	}
	if len(ext.Options) == 0 && len(ext.Subsections) == 0 {
		cfg.RemoveSection("extensions")
	}
	var buf bytes.Buffer
	if err := fmtconfig.NewEncoder(&buf).Encode(cfg); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// perWorktreeRef tells refs that belong to one worktree and are not
// carried over.
func perWorktreeRef(name string) bool {
	for _, p := range []string{"refs/bisect/", "refs/worktree/", "refs/rewritten/"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// refs writes every shared ref: direct ones into packed-refs, symbolic
// ones (refs/remotes/origin/HEAD) as loose files.
func (n *normalizer) refs() error {
	refs, err := n.r.Storage.IterReferences()
	if err != nil {
		return fmt.Errorf("read refs: %w", err)
	}
	var packed []string
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		name := ref.Name().String()
		if !strings.HasPrefix(name, "refs/") || perWorktreeRef(name) {
			return nil
		}
		if ref.Type() == plumbing.SymbolicReference {
			n.addFile(name, 0o644, []byte("ref: "+ref.Target().String()+"\n"))
			return nil
		}
		packed = append(packed, ref.Hash().String()+" "+name+"\n")
		n.roots = append(n.roots, root{h: ref.Hash()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("read refs: %w", err)
	}
	sort.Slice(packed, func(i, j int) bool { return packed[i][41:] < packed[j][41:] })
	n.addFile("packed-refs", 0o644, []byte("# pack-refs with: sorted \n"+strings.Join(packed, "")))
	return nil
}

// emptyBlob is the blob an intent-to-add index entry names; Git knows it
// without storing it.
var emptyBlob = plumbing.NewHash("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")

func (n *normalizer) collectRoots() error {
	head, err := n.r.Storage.Reference(plumbing.HEAD)
	if err != nil {
		return fmt.Errorf("read HEAD: %w", err)
	}
	if head.Type() == plumbing.HashReference {
		n.roots = append(n.roots, root{h: head.Hash()})
	}
	idx, err := n.r.Storage.Index()
	if err != nil {
		return newError(CodeUnsupported, ".git/index", "cannot read the index", err)
	}
	for _, e := range idx.Entries {
		if e.Mode != filemode.Submodule && e.Hash != emptyBlob {
			n.roots = append(n.roots, root{h: e.Hash, blob: true})
		}
	}
	if idx.Cache != nil {
		for _, t := range idx.Cache.Entries {
			if t.Entries >= 0 {
				n.roots = append(n.roots, root{h: t.Hash, optional: true})
			}
		}
	}
	if idx.ResolveUndo != nil {
		for _, e := range idx.ResolveUndo.Entries {
			for _, h := range e.Stages {
				n.roots = append(n.roots, root{h: h, blob: true, optional: true})
			}
		}
	}
	// Every stash, not only the latest that refs/stash names: `git stash
	// list` reads the reflog.
	stash, err := readReflog(n.r.Common, "logs/refs/stash")
	if err != nil {
		return err
	}
	for _, h := range stash {
		n.roots = append(n.roots, root{h: h, optional: true})
	}
	return nil
}

func readReflog(fsys billy.Filesystem, name string) ([]plumbing.Hash, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []plumbing.Hash
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && hexName.MatchString(f[1]) {
			out = append(out, plumbing.NewHash(f[1]))
		}
	}
	return out, sc.Err()
}

var hexName = regexp.MustCompile(`^[0-9a-f]{40}$`)
var hexInText = regexp.MustCompile(`\b[0-9a-f]{40}\b`)

// scanNames keeps the objects named in a small state file (ORIG_HEAD,
// MERGE_HEAD, FETCH_HEAD, rebase state, ...) when they exist.
func (n *normalizer) scanNames(fsys billy.Filesystem, name string) error {
	b, err := readSmall(fsys, name)
	if err != nil {
		return err
	}
	for _, m := range hexInText.FindAll(b, -1) {
		n.roots = append(n.roots, root{h: plumbing.NewHash(string(m)), optional: true})
	}
	return nil
}

// walkObjects collects every object reachable from the roots, without
// reading blob contents. Shallow commits' parents are not followed.
func (n *normalizer) walkObjects() error {
	shallow := map[plumbing.Hash]bool{}
	if b, err := readSmall(n.r.Common, "shallow"); err != nil {
		return err
	} else {
		for _, l := range strings.Fields(string(b)) {
			shallow[plumbing.NewHash(l)] = true
		}
	}
	missing := func(h plumbing.Hash, err error) error {
		return newError(CodeUnsupported, ".git", "object "+h.String()+" is missing (a partial clone or a damaged repository cannot be normalized)", err)
	}
	stack := n.roots
	n.roots = nil
	for len(stack) > 0 {
		if err := n.c.ctx.Err(); err != nil {
			return err
		}
		rt := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := n.seen[rt.h]; ok {
			continue
		}
		if rt.blob {
			if err := n.r.Store.HasEncodedObject(rt.h); err != nil {
				if rt.optional && errors.Is(err, plumbing.ErrObjectNotFound) {
					continue
				}
				return missing(rt.h, err)
			}
			n.seen[rt.h] = plumbing.BlobObject
			continue
		}
		obj, err := n.r.Store.EncodedObject(plumbing.AnyObject, rt.h)
		if err != nil {
			if rt.optional && errors.Is(err, plumbing.ErrObjectNotFound) {
				continue
			}
			return missing(rt.h, err)
		}
		n.seen[rt.h] = obj.Type()
		switch obj.Type() {
		case plumbing.CommitObject:
			var c object.Commit
			if err := c.Decode(obj); err != nil {
				return fmt.Errorf("decode commit %s: %w", rt.h, err)
			}
			stack = append(stack, root{h: c.TreeHash})
			if !shallow[rt.h] {
				for _, p := range c.ParentHashes {
					stack = append(stack, root{h: p})
				}
			}
		case plumbing.TreeObject:
			var t object.Tree
			if err := t.Decode(obj); err != nil {
				return fmt.Errorf("decode tree %s: %w", rt.h, err)
			}
			for _, e := range t.Entries {
				switch e.Mode {
				case filemode.Submodule:
				case filemode.Dir:
					stack = append(stack, root{h: e.Hash})
				default:
					stack = append(stack, root{h: e.Hash, blob: true})
				}
			}
		case plumbing.TagObject:
			var t object.Tag
			if err := t.Decode(obj); err != nil {
				return fmt.Errorf("decode tag %s: %w", rt.h, err)
			}
			stack = append(stack, root{h: t.Target})
		}
	}
	return nil
}

// smallObject is the size below which a loose object is compressed once
// into memory; larger ones are compressed twice (once to learn the size
// the tar header needs), so memory stays bounded.
const smallObject = 1 << 20

func (n *normalizer) writeObject(p string, v *vnode) error {
	obj, err := n.r.Store.EncodedObject(v.objType, v.obj)
	if err != nil {
		return newError(CodeChangedDuringCapture, p, "object vanished while it was archived", err)
	}
	if obj.Size() <= smallObject {
		var buf bytes.Buffer
		if err := deflateObject(&buf, obj); err != nil {
			return err
		}
		return n.c.writeStream(p, v.mode, v.mtime, int64(buf.Len()), func(w io.Writer) error {
			_, err := w.Write(buf.Bytes())
			return err
		})
	}
	cw := &countWriter{w: io.Discard}
	if err := deflateObject(cw, obj); err != nil {
		return err
	}
	return n.c.writeStream(p, v.mode, v.mtime, cw.n, func(w io.Writer) error { return deflateObject(w, obj) })
}

// deflateObject writes obj in Git's loose object format.
func deflateObject(w io.Writer, obj plumbing.EncodedObject) error {
	zw, err := zlib.NewWriterLevel(w, zlib.BestSpeed)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(zw, "%s %d\x00", obj.Type(), obj.Size()); err != nil {
		return err
	}
	r, err := obj.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	if n, err := io.Copy(zw, r); err != nil {
		return err
	} else if n != obj.Size() {
		return fmt.Errorf("object %s: read %d bytes, expected %d", obj.Hash(), n, obj.Size())
	}
	return zw.Close()
}
