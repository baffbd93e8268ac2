package snapshot

// The capture cache lets an incremental capture skip reading files that cannot have changed
// since the capture (or restore) the cache belongs to: what that capture knew of each regular
// file (identity, size, times, mode, SHA-256) as of its start. A file whose stat still equals
// its cache entry, and whose mtime and ctime are older than the cache's start by more than a
// coarse timestamp tick, has the same bytes (a change moves ctime, which nobody can set back);
// the capture then lists it as a ref, with the cached SHA-256, and archives no bytes for it.
// A file changed within that tick of the start is read again even when every stamp agrees:
// "touch -r" after an in-place rewrite of the same size leaves size and mtime as they were,
// and only a ctime clearly before the start rules that out.
//
// The cache lives in the runner's private state directory, never in the workspace. It is one
// file of JSON lines, written to a temporary and renamed into place, and read back
// defensively: a line that does not parse, is too long, comes out of tree order or past the
// entry limit ends its use (the files after it are read), since a missing entry only costs a
// read. What the cache claims is the runner's word; the controller checks every ref against
// the parent receipt's own manifest, so a bad cache can spoil this workspace's save but never
// point at bytes the workspace did not have.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

// CacheFileName is the cache's name in the runner's state directory.
const CacheFileName = "capture-cache.jsonl"

// cacheVersion is the format this build writes and reads.
const cacheVersion = 1

// MaxCacheEntries bounds the files a cache lists: the manifest's own entry limit.
const MaxCacheEntries = DefaultMaxEntries

// maxCacheLine bounds one line: a 4 KiB path escaped six bytes a byte and the rest.
const maxCacheLine = 64 << 10

// RacyWindow is how long after its last change a file is read again whatever its stamp says
// (a coarse timestamp tick, as the fence uses).
const RacyWindow = 100 * time.Millisecond

type cacheHeader struct {
	Version     int    `json:"version"`
	SnapshotID  string `json:"snapshot_id"`
	WorkspaceID string `json:"workspace_id"`
	Start       int64  `json:"start_ns"` // when the capture began, or the restore published
}

type cacheLine struct {
	Path   string `json:"p"`
	Dev    uint64 `json:"d"`
	Ino    uint64 `json:"i"`
	Size   int64  `json:"s"`
	Mtime  int64  `json:"m"` // ns
	Ctime  int64  `json:"c"` // ns
	Mode   uint32 `json:"o"`
	Sparse bool   `json:"sp,omitempty"`
	SHA256 string `json:"h"`
}

// Cache is an open capture cache, read once from start to end alongside a capture's walk
// (both are in tree order).
type Cache struct {
	SnapshotID, WorkspaceID string
	Start                   time.Time

	f    *os.File
	sc   *bufio.Scanner
	cur  *cacheLine
	prev string
	n    int
	done bool
}

// OpenCache opens the cache in dir. A missing cache is (nil, nil); an unreadable header is an
// error the caller logs before capturing in full.
func OpenCache(dir string) (*Cache, error) {
	f, err := os.Open(filepath.Join(dir, CacheFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxCacheLine)
	var h cacheHeader
	if !sc.Scan() {
		f.Close()
		return nil, fmt.Errorf("capture cache: no header: %v", sc.Err())
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Version != cacheVersion || h.SnapshotID == "" {
		f.Close()
		return nil, fmt.Errorf("capture cache: unusable header (version %d): %v", h.Version, err)
	}
	c := &Cache{SnapshotID: h.SnapshotID, WorkspaceID: h.WorkspaceID, Start: time.Unix(0, h.Start), f: f, sc: sc}
	c.advance()
	return c, nil
}

// Close releases the cache's file.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	return c.f.Close()
}

// advance reads the next line; anything wrong ends the cache.
func (c *Cache) advance() {
	c.cur = nil
	if c.done || !c.sc.Scan() {
		c.done = true
		return
	}
	var l cacheLine
	if err := json.Unmarshal(c.sc.Bytes(), &l); err != nil || l.Path == "" || len(l.SHA256) != 64 || l.Size < 0 ||
		(c.prev != "" && cmpTree(c.prev, l.Path) >= 0) || c.n >= MaxCacheEntries {
		c.done = true
		return
	}
	c.n++
	c.prev, c.cur = l.Path, &l
}

// lookup returns the entry of p, if any. Calls must come in tree order.
func (c *Cache) lookup(p string) *cacheLine {
	for c.cur != nil && cmpTree(c.cur.Path, p) < 0 {
		c.advance()
	}
	if c.cur != nil && c.cur.Path == p {
		return c.cur
	}
	return nil
}

// unchanged says whether the file of stamp st, listed as p, is the one the cache read, and
// settled long enough before that read that its stamp proves its bytes.
func (c *Cache) unchanged(p string, st stableread.Stamp) *cacheLine {
	l := c.lookup(p)
	if l == nil || l.Dev != st.Dev || l.Ino != st.Ino || l.Size != st.Size ||
		l.Mtime != st.Mtime.Nano() || l.Ctime != st.Ctime.Nano() || l.Mode != st.Mode&0o7777 {
		return nil
	}
	limit := c.Start.Add(-RacyWindow).UnixNano()
	if st.Mtime.Nano() >= limit || st.Ctime.Nano() >= limit {
		return nil
	}
	return l
}

// cmpTree compares two canonical paths in archive order: the tree in preorder, each
// directory's children by name, so "a/b" comes before "a-c".
func cmpTree(a, b string) int {
	for {
		ca, ra, moreA := strings.Cut(a, "/")
		cb, rb, moreB := strings.Cut(b, "/")
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1
		case !moreB:
			return 1
		}
		a, b = ra, rb
	}
}

// CacheWriter writes a new cache to a temporary file beside the cache; Commit renames it into
// place, Abort removes it.
type CacheWriter struct {
	dir string
	f   *os.File
	w   *bufio.Writer
	n   int
	err error
}

// NewCacheWriter starts the cache of snapshot snapID of workspace wsID, whose knowledge of the
// files dates from start.
func NewCacheWriter(dir, wsID, snapID string, start time.Time) (*CacheWriter, error) {
	f, err := os.CreateTemp(dir, CacheFileName+".tmp-*")
	if err != nil {
		return nil, err
	}
	cw := &CacheWriter{dir: dir, f: f, w: bufio.NewWriterSize(f, 64<<10)}
	cw.line(cacheHeader{Version: cacheVersion, SnapshotID: snapID, WorkspaceID: wsID, Start: start.UnixNano()})
	return cw, nil
}

func (cw *CacheWriter) line(v any) {
	if cw.err != nil {
		return
	}
	js, err := json.Marshal(v)
	if err != nil {
		cw.err = err
		return
	}
	if len(js) >= maxCacheLine {
		return // never read back: leave it out, the file is read next time
	}
	cw.w.Write(js)
	cw.err = cw.w.WriteByte('\n')
}

// add records the file entry e as of stamp st. Entries must come in tree order.
func (cw *CacheWriter) add(e *Entry, st stableread.Stamp) {
	if cw.n >= MaxCacheEntries {
		return
	}
	cw.n++
	cw.line(cacheLine{Path: e.Path, Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtime.Nano(), Ctime: st.Ctime.Nano(),
		Mode: st.Mode & 0o7777, Sparse: e.Sparse, SHA256: e.SHA256})
}

// Commit publishes the cache, replacing the previous one.
func (cw *CacheWriter) Commit() error {
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	if cw.err == nil {
		cw.err = cw.f.Sync()
	}
	if err := cw.f.Close(); cw.err == nil {
		cw.err = err
	}
	if cw.err == nil {
		cw.err = os.Rename(cw.f.Name(), filepath.Join(cw.dir, CacheFileName))
	}
	if cw.err != nil {
		os.Remove(cw.f.Name())
	}
	return cw.err
}

// Abort drops the new cache. The previous one stays.
func (cw *CacheWriter) Abort() {
	cw.f.Close()
	os.Remove(cw.f.Name())
}

// RemoveCache drops the cache of dir, for a workspace whose tree the runner no longer knows.
func RemoveCache(dir string) error {
	err := os.Remove(filepath.Join(dir, CacheFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// RecordRestored writes into cw the files of the manifest m just restored under root's dir,
// as they are now. published is when the restore began to publish: a file changed after it
// has a ctime later than that, so the cache's racy rule reads it again.
func RecordRestored(root interface {
	Lstat(string) (fs.FileInfo, error)
}, dir string, m *Manifest, cw *CacheWriter) error {
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Type != TypeFile {
			continue
		}
		fi, err := root.Lstat(join(dir, e.Path))
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*unix.Stat_t)
		if !ok || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size {
			continue
		}
		cw.add(e, stableread.FromStat(st))
	}
	return cw.err
}

// TreeDigest is the SHA-256 of json.Marshal(entries) with every Ref cleared: the same for a
// tree whether its capture was full or incremental, so that pending-change checks compare
// equal for the same tree.
func TreeDigest(entries []Entry) (string, error) {
	if entries == nil {
		sum := sha256.Sum256([]byte("null"))
		return hex.EncodeToString(sum[:]), nil
	}
	d := newEntryDigest()
	for i := range entries {
		e := entries[i]
		e.Ref = false
		if err := d.add(&e); err != nil {
			return "", err
		}
	}
	return d.sum(), nil
}

// CompareTree orders two canonical paths as an archive holds them (see cmpTree).
func CompareTree(a, b string) int { return cmpTree(a, b) }
