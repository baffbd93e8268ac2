package savedcopy

// The index of a receipt's archive that saved-copy reads use: a file under DATA/cache/saved-index,
// built once per receipt as the archive is verified (savedindex_build.go), read with ReadAt so
// that the page cache, not the heap, holds what is hot. Memory does not grow with the number of
// entries, whether building or reading.
//
// Layout, little endian:
//
//	header   magic, entries n, offset of the node table, offset of the child slots
//	records  the JSON of each entry, in archive order
//	nodes    n+1 of {record offset u64, record length u32, children u32, first child slot u64}:
//	         node 0 is the root, node i the archive's entry i-1
//	slots    n of {node u32}: each directory's children, sorted by name, contiguous, the
//	         directories in node order

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

const (
	indexMagic      = "TTHSIDX1"
	indexHeaderSize = 32
	indexNodeSize   = 24
	indexSlotSize   = 4
)

// Index is an open index file.
type Index struct {
	f        *os.File
	n        uint32
	nodesOff int64
	slotsOff int64
}

// indexNode is one node table record.
type indexNode struct {
	recOff     int64
	recLen     uint32
	children   uint32
	firstChild uint64
}

func openIndex(name string) (*Index, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	x := &Index{f: f}
	if err := x.readHeader(); err != nil {
		f.Close()
		return nil, fmt.Errorf("saved index %s: %w", name, err)
	}
	return x, nil
}

// Close closes the index file.
func (x *Index) Close() error { return x.f.Close() }

func (x *Index) readHeader() error {
	var h [indexHeaderSize]byte
	if _, err := x.f.ReadAt(h[:], 0); err != nil {
		return err
	}
	if string(h[:8]) != indexMagic {
		return fmt.Errorf("not an index")
	}
	n := binary.LittleEndian.Uint64(h[8:])
	x.nodesOff = int64(binary.LittleEndian.Uint64(h[16:]))
	x.slotsOff = int64(binary.LittleEndian.Uint64(h[24:]))
	st, err := x.f.Stat()
	if err != nil {
		return err
	}
	if n > 1<<31 || x.nodesOff < indexHeaderSize || x.slotsOff != x.nodesOff+int64(n+1)*indexNodeSize || st.Size() != x.slotsOff+int64(n)*indexSlotSize {
		return fmt.Errorf("inconsistent sizes")
	}
	x.n = uint32(n)
	return nil
}

func (x *Index) node(i uint32) (indexNode, error) {
	if i > x.n {
		return indexNode{}, fmt.Errorf("saved index: node %d of %d", i, x.n)
	}
	var b [indexNodeSize]byte
	if _, err := x.f.ReadAt(b[:], x.nodesOff+int64(i)*indexNodeSize); err != nil {
		return indexNode{}, err
	}
	return indexNode{
		recOff: int64(binary.LittleEndian.Uint64(b[0:])), recLen: binary.LittleEndian.Uint32(b[8:]),
		children: binary.LittleEndian.Uint32(b[12:]), firstChild: binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

func (x *Index) entry(nd indexNode) (snapshot.Entry, error) {
	buf := make([]byte, nd.recLen)
	if _, err := x.f.ReadAt(buf, nd.recOff); err != nil {
		return snapshot.Entry{}, err
	}
	var e snapshot.Entry
	err := json.Unmarshal(buf, &e)
	return e, err
}

// child returns the node number and entry of dir's k-th child by name.
func (x *Index) child(dir indexNode, k uint32) (uint32, snapshot.Entry, error) {
	var b [indexSlotSize]byte
	if _, err := x.f.ReadAt(b[:], x.slotsOff+int64(dir.firstChild+uint64(k))*indexSlotSize); err != nil {
		return 0, snapshot.Entry{}, err
	}
	i := binary.LittleEndian.Uint32(b[:])
	nd, err := x.node(i)
	if err != nil {
		return 0, snapshot.Entry{}, err
	}
	e, err := x.entry(nd)
	return i, e, err
}

// search returns the position among dir's children of the first whose name is after name (or
// equal to it, when inclusive).
func (x *Index) search(dir indexNode, name string, inclusive bool) (uint32, error) {
	var ferr error
	k := sort.Search(int(dir.children), func(k int) bool {
		if ferr != nil {
			return true
		}
		_, e, err := x.child(dir, uint32(k))
		if err != nil {
			ferr = err
			return true
		}
		base := path.Base(e.Path)
		return base > name || inclusive && base == name
	})
	return uint32(k), ferr
}

// Lookup finds a cleaned path the way the runner's guard resolves one: every component before
// the last must be a directory (a symlink is refused, never followed; a file is not a
// directory), and a missing component is not_found. It returns the entry's position in the
// archive, or -1 for the root.
func (x *Index) Lookup(snap *api.Snapshot, clean string) (snapshot.Entry, int, error) {
	if clean == "." {
		return rootEntry(snap), -1, nil
	}
	elems := strings.Split(clean, "/")
	dir, err := x.node(0)
	if err != nil {
		return snapshot.Entry{}, 0, err
	}
	for i, name := range elems {
		k, err := x.search(dir, name, true)
		if err != nil {
			return snapshot.Entry{}, 0, err
		}
		var n uint32
		var e snapshot.Entry
		if k < dir.children {
			if n, e, err = x.child(dir, k); err != nil {
				return snapshot.Entry{}, 0, err
			}
		}
		if k == dir.children || path.Base(e.Path) != name {
			return snapshot.Entry{}, 0, protocol.Errorf(protocol.CodeNotFound, "%s: no such file or directory in saved copy %s", clean, snap.ID)
		}
		if i == len(elems)-1 {
			return e, int(n) - 1, nil
		}
		switch e.Type {
		case snapshot.TypeSymlink:
			return snapshot.Entry{}, 0, protocol.Errorf(protocol.CodeSymlinkRefused, "%s: %s is a symlink; it is never followed", clean, e.Path)
		case snapshot.TypeFile:
			return snapshot.Entry{}, 0, protocol.Errorf(protocol.CodeNotDirectory, "%s: %s is not a directory", clean, e.Path)
		}
		if dir, err = x.node(n); err != nil {
			return snapshot.Entry{}, 0, err
		}
	}
	panic("unreachable")
}

// List is one page of a saved directory (the entry e at archive position pos, from Lookup),
// with the runner's paging: sorted by name, starting after cursor, at most limit entries
// (default and cap protocol.MaxListPage), Next set to the last name when more follow.
func (x *Index) List(e snapshot.Entry, pos int, clean, cursor, limitArg string) (protocol.FsListResult, error) {
	switch e.Type {
	case snapshot.TypeSymlink:
		return protocol.FsListResult{}, protocol.Errorf(protocol.CodeSymlinkRefused, "%s is a symlink; it is never followed", clean)
	case snapshot.TypeFile:
		return protocol.FsListResult{}, protocol.Errorf(protocol.CodeNotDirectory, "%s is not a directory", clean)
	}
	limit := 0
	_, _ = fmt.Sscan(limitArg, &limit)
	if limit <= 0 || limit > protocol.MaxListPage {
		limit = protocol.MaxListPage
	}
	dir, err := x.node(uint32(pos + 1))
	if err != nil {
		return protocol.FsListResult{}, err
	}
	k, err := x.search(dir, cursor, false)
	if err != nil {
		return protocol.FsListResult{}, err
	}
	out := protocol.FsListResult{Entries: []protocol.FileInfo{}}
	for ; k < dir.children; k++ {
		if len(out.Entries) == limit {
			out.Next = out.Entries[len(out.Entries)-1].Name
			break
		}
		_, c, err := x.child(dir, k)
		if err != nil {
			return protocol.FsListResult{}, err
		}
		out.Entries = append(out.Entries, FileInfo(c))
	}
	return out, nil
}

// rootEntry stands for the workspace root, which an archive does not hold as an entry.
func rootEntry(snap *api.Snapshot) snapshot.Entry {
	return snapshot.Entry{Path: ".", Type: snapshot.TypeDir, Mode: 0o755, MTime: snap.CreatedAt.UTC()}
}

// FileInfo describes an archived entry as the runner describes a live one.
func FileInfo(e snapshot.Entry) protocol.FileInfo {
	fi := protocol.FileInfo{Path: e.Path, Name: path.Base(e.Path), Mode: e.Mode & 0o777, Size: e.Size, MTime: e.MTime}
	switch e.Type {
	case snapshot.TypeFile:
		fi.Type = protocol.FileRegular
	case snapshot.TypeDir:
		fi.Type, fi.Size = protocol.FileDir, 0
	case snapshot.TypeSymlink:
		// A link's size is its target's length, as lstat(2) says.
		fi.Type, fi.LinkTarget, fi.Size = protocol.FileSymlink, e.LinkTarget, int64(len(e.LinkTarget))
	default:
		fi.Type = protocol.FileOther
	}
	return fi
}
