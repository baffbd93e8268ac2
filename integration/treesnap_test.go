package integration

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// entrySnap is everything about one entry that an escaping operation could change: identity,
// type and mode, size, times, a link's target and a file's content.
type entrySnap struct {
	ino          uint64
	mode         fs.FileMode
	size         int64
	mtime, ctime time.Time
	target       string
	sum          string
}

// treeSnap maps slash paths (relative to the snapshot's root, "." for the root itself) to entries.
type treeSnap map[string]entrySnap

// snapTree walks dir with Lstat, never following a link, and hashes every regular file. Names in
// skipContent are described without their size, times or content (a log a process appends to).
func snapTree(t *testing.T, dir string, skipContent ...string) treeSnap {
	t.Helper()
	out := treeSnap{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entrySnap{ino: st.Ino, mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime(),
			ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec)}
		for _, s := range skipContent {
			if rel == s {
				out[filepath.ToSlash(rel)] = entrySnap{ino: st.Ino, mode: fi.Mode()}
				return nil
			}
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.target, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			e.sum, err = fileSHA256(p)
		}
		out[filepath.ToSlash(rel)] = e
		return err
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	return out
}

// diff lists what differs between two snapshots, sorted; nil when identical.
func (a treeSnap) diff(b treeSnap) []string {
	var out []string
	for p, ea := range a {
		eb, ok := b[p]
		switch {
		case !ok:
			out = append(out, "removed "+p)
		case ea != eb:
			out = append(out, fmt.Sprintf("changed %s: %+v -> %+v", p, ea, eb))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, "created "+p)
		}
	}
	sort.Strings(out)
	return out
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// tempFilesUnder lists every entry below dir whose name marks an unpublished write.
func tempFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if strings.HasPrefix(d.Name(), tempPrefix) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tempPrefix is fsguard.TempPrefix, spelled out here because it is part of what operators see.
const tempPrefix = ".tether-tmp-"

// codeOf is the typed code of a client error ("" for none).
func codeOf(err error) protocol.Code {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// mustWrite writes p from the host, as the owner of the directory it lands in (see ownLikeParent).
func mustWrite(t *testing.T, p string, data []byte, mode fs.FileMode) {
	t.Helper()
	owner := existingAncestor(p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	ownLikeParent(t, owner, p)
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	owner := existingAncestor(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	ownLikeParent(t, owner, p)
}

// existingAncestor is the nearest directory above p that exists.
func existingAncestor(p string) string {
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == "/" {
			return d
		}
	}
}

// ownLikeParent gives p, and the directories made for it below ancestor, to ancestor's owner.
// What a test plants in a workspace from the host is then the workspace user's, as if the agent
// had made it: a confined runner acts with that user's rights only.
func ownLikeParent(t *testing.T, ancestor, p string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(ancestor, &st); err != nil {
		t.Fatal(err)
	}
	for q := p; q != ancestor && q != "/"; q = filepath.Dir(q) {
		if err := os.Lchown(q, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}
