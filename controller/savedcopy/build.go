package savedcopy

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Indexes is a cache of receipts' indexes in a directory (DATA/cache/saved-index), owned by the
// controller that made it. It builds each receipt's index once, however many reads ask for it
// at the same time. Indexes from an earlier process are removed before the first build: an
// archive is verified whole by each controller before it serves reads from it.
type Indexes struct {
	dir       string
	archives  Archives
	log       *slog.Logger
	goRoutine func(name string, fn func(ctx context.Context)) bool // starts builds, which outlive the requests that started them

	mu       sync.Mutex
	cleared  bool
	building map[string]*indexBuild
}

type indexBuild struct {
	done chan struct{}
	err  error
}

// NewIndexes returns the cache of the indexes in dir of archives' receipts. goRoutine starts a
// build as a named routine of the owner (a routine.Group's Go), which the owner stops and waits
// for before it closes archives' blob store; it reports false once the owner is shutting down.
func NewIndexes(dir string, archives Archives, log *slog.Logger, goRoutine func(name string, fn func(ctx context.Context)) bool) *Indexes {
	return &Indexes{dir: dir, archives: archives, log: log, goRoutine: goRoutine}
}

// Dir is the directory the indexes are in.
func (x *Indexes) Dir() string { return x.dir }

// Open opens a receipt's index, building it first if need be: the whole archive is
// read and checked, as a verify would (the stored object against the receipt, every entry
// against the manifest), and the index is used only once it all matched.
func (x *Indexes) Open(ctx context.Context, snap *api.Snapshot) (*Index, error) {
	dir := x.dir
	name := filepath.Join(dir, snap.ID+"-"+snap.SHA256+".idx")
	x.mu.Lock()
	if !x.cleared {
		if err := os.RemoveAll(dir); err != nil {
			x.mu.Unlock()
			return nil, fmt.Errorf("saved index cache: %w", err)
		}
		x.cleared = true
	}
	if idx, err := openIndex(name); err == nil {
		x.mu.Unlock()
		return idx, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		x.log.Warn("saved index unreadable; building it again", "snapshot", snap.ID, "err", err)
	}
	b := x.building[name]
	if b == nil {
		b = &indexBuild{done: make(chan struct{})}
		if x.building == nil {
			x.building = map[string]*indexBuild{}
		}
		x.building[name] = b
		// The build outlives the request that started it: the others waiting need it too. It
		// ends with the owner.
		if !x.goRoutine("saved index "+snap.ID, func(ctx context.Context) { x.runBuild(ctx, b, snap, dir, name) }) {
			b.err = errShuttingDown
			delete(x.building, name)
			close(b.done)
		}
	}
	x.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if b.err != nil {
		return nil, b.err
	}
	return openIndex(name)
}

// errShuttingDown is a build's error when the owner no longer starts any.
var errShuttingDown = protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")

// runBuild builds b's index and tells whoever waits for it.
func (x *Indexes) runBuild(ctx context.Context, b *indexBuild, snap *api.Snapshot, dir, name string) {
	b.err = x.build(ctx, snap, dir, name)
	x.mu.Lock()
	delete(x.building, name)
	x.mu.Unlock()
	close(b.done)
}

// build reads and verifies the archive, writing the index beside it as it goes, and
// publishes it under name once both are complete.
func (x *Indexes) build(ctx context.Context, snap *api.Snapshot, dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("saved index cache: %w", err)
	}
	b, err := newIndexBuilder(dir)
	if err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	defer b.abort()
	if _, err := x.archives.Verify(ctx, snap, b.add); err != nil {
		return err
	}
	if err := b.finish(); err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	return b.publish(name)
}

// indexBuilder writes an index as the archive's entries come, keeping only the chain of open
// directories: the records go straight to the index file, and two side files (a node's record
// place; its parent and rank among its siblings) let finish place every child once each
// directory's number of children is known.
type indexBuilder struct {
	f, places, parents, counts *os.File
	rec, placeW, parentW       *bufio.Writer
	recOff                     int64
	n                          uint32
	open                       []buildDir
	buf                        [12]byte
}

type buildDir struct {
	node     uint32
	path     string
	children uint32
}

const dirBit = 1 << 31 // in a parents record: the node is a directory

func newIndexBuilder(dir string) (*indexBuilder, error) {
	b := &indexBuilder{recOff: indexHeaderSize, open: []buildDir{{path: "."}}}
	var err error
	for _, f := range []**os.File{&b.f, &b.places, &b.parents, &b.counts} {
		if *f, err = os.CreateTemp(dir, ".build-*"); err != nil {
			b.abort()
			return nil, err
		}
	}
	// The side files are needed only while building: unlinked now, they go with the process.
	for _, f := range []*os.File{b.places, b.parents, b.counts} {
		os.Remove(f.Name())
	}
	if _, err := b.f.Seek(indexHeaderSize, io.SeekStart); err != nil {
		b.abort()
		return nil, err
	}
	b.rec, b.placeW, b.parentW = bufio.NewWriterSize(b.f, 256<<10), bufio.NewWriter(b.places), bufio.NewWriter(b.parents)
	return b, nil
}

// add records one verified entry; Verify has already checked that entries come in tree order.
func (b *indexBuilder) add(e snapshot.Entry) error {
	parent := path.Dir(e.Path)
	for len(b.open) > 1 && b.open[len(b.open)-1].path != parent {
		if err := b.closeDir(); err != nil {
			return err
		}
	}
	top := &b.open[len(b.open)-1]
	if top.path != parent || b.n == dirBit-1 {
		return fmt.Errorf("saved index: entry %s out of tree order", e.Path)
	}
	b.n++
	sib := top.children
	top.children++
	js, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := b.rec.Write(js); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(b.buf[0:], uint64(b.recOff))
	binary.LittleEndian.PutUint32(b.buf[8:], uint32(len(js)))
	b.recOff += int64(len(js))
	if _, err := b.placeW.Write(b.buf[:12]); err != nil {
		return err
	}
	if e.Type == snapshot.TypeDir {
		sib |= dirBit
	}
	binary.LittleEndian.PutUint32(b.buf[0:], top.node)
	binary.LittleEndian.PutUint32(b.buf[4:], sib)
	if _, err := b.parentW.Write(b.buf[:8]); err != nil {
		return err
	}
	if e.Type == snapshot.TypeDir {
		b.open = append(b.open, buildDir{node: b.n, path: e.Path})
	}
	return nil
}

// closeDir writes the number of children of the innermost open directory.
func (b *indexBuilder) closeDir() error {
	d := b.open[len(b.open)-1]
	b.open = b.open[:len(b.open)-1]
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], d.children)
	_, err := b.counts.WriteAt(c[:], int64(d.node)*4)
	return err
}

// finish writes the node table (each directory's first slot is the sum of the children of the
// nodes before it), then the slots (children come in name order, so each directory's run is
// written in order as the side file is read again), then the header.
func (b *indexBuilder) finish() error {
	for len(b.open) > 0 {
		if err := b.closeDir(); err != nil {
			return err
		}
	}
	if err := b.rec.Flush(); err != nil {
		return err
	}
	if err := b.placeW.Flush(); err != nil {
		return err
	}
	if err := b.parentW.Flush(); err != nil {
		return err
	}
	nodesOff := (b.recOff + 7) &^ 7
	slotsOff := nodesOff + int64(b.n+1)*indexNodeSize
	if err := b.writeNodes(nodesOff); err != nil {
		return err
	}
	if err := b.writeSlots(nodesOff, slotsOff); err != nil {
		return err
	}
	if err := b.f.Truncate(slotsOff + int64(b.n)*indexSlotSize); err != nil {
		return err
	}
	var h [indexHeaderSize]byte
	copy(h[:], indexMagic)
	binary.LittleEndian.PutUint64(h[8:], uint64(b.n))
	binary.LittleEndian.PutUint64(h[16:], uint64(nodesOff))
	binary.LittleEndian.PutUint64(h[24:], uint64(slotsOff))
	_, err := b.f.WriteAt(h[:], 0)
	return err
}

func (b *indexBuilder) writeNodes(nodesOff int64) error {
	places := bufio.NewReader(io.NewSectionReader(b.places, 0, int64(b.n)*12))
	counts := bufio.NewReader(io.NewSectionReader(b.counts, 0, int64(b.n+1)*4))
	w := bufio.NewWriterSize(io.NewOffsetWriter(b.f, nodesOff), 256<<10)
	var first uint64
	var place [12]byte
	var count [4]byte
	var nd [indexNodeSize]byte
	for i := uint32(0); i <= b.n; i++ {
		clear(place[:])
		if i > 0 {
			if _, err := io.ReadFull(places, place[:]); err != nil {
				return err
			}
		}
		// A file's count was never written: the side file reads zero there, or ends early.
		clear(count[:])
		if _, err := io.ReadFull(counts, count[:]); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
		copy(nd[:12], place[:])
		copy(nd[12:16], count[:])
		binary.LittleEndian.PutUint64(nd[16:], first)
		first += uint64(binary.LittleEndian.Uint32(count[:]))
		if _, err := w.Write(nd[:]); err != nil {
			return err
		}
	}
	if first != uint64(b.n) {
		return fmt.Errorf("children of all directories add up to %d, not %d", first, b.n)
	}
	return w.Flush()
}

// slotRun is an open directory's run of child slots, written a buffer at a time.
type slotRun struct {
	node    uint32
	next    int64 // the slot the buffer starts at
	pending []byte
}

func (b *indexBuilder) writeSlots(nodesOff, slotsOff int64) error {
	firstSlot := func(node uint32) (int64, error) {
		var v [8]byte
		_, err := b.f.ReadAt(v[:], nodesOff+int64(node)*indexNodeSize+16)
		return int64(binary.LittleEndian.Uint64(v[:])), err
	}
	flush := func(r *slotRun) error {
		_, err := b.f.WriteAt(r.pending, slotsOff+r.next*indexSlotSize)
		r.next += int64(len(r.pending) / indexSlotSize)
		r.pending = r.pending[:0]
		return err
	}
	const runBuf = 128 * indexSlotSize
	runs := []slotRun{{node: 0}}
	parents := bufio.NewReader(io.NewSectionReader(b.parents, 0, int64(b.n)*8))
	var rec [8]byte
	for i := uint32(1); i <= b.n; i++ {
		if _, err := io.ReadFull(parents, rec[:]); err != nil {
			return err
		}
		parent, sib := binary.LittleEndian.Uint32(rec[0:]), binary.LittleEndian.Uint32(rec[4:])
		for len(runs) > 1 && runs[len(runs)-1].node != parent {
			if err := flush(&runs[len(runs)-1]); err != nil {
				return err
			}
			runs = runs[:len(runs)-1]
		}
		r := &runs[len(runs)-1]
		if r.node != parent {
			return fmt.Errorf("node %d: parent %d is not open", i, parent)
		}
		r.pending = binary.LittleEndian.AppendUint32(r.pending, i)
		if len(r.pending) == runBuf {
			if err := flush(r); err != nil {
				return err
			}
		}
		if sib&dirBit != 0 {
			first, err := firstSlot(i)
			if err != nil {
				return err
			}
			runs = append(runs, slotRun{node: i, next: first, pending: make([]byte, 0, runBuf)})
		}
	}
	for len(runs) > 0 {
		if err := flush(&runs[len(runs)-1]); err != nil {
			return err
		}
		runs = runs[:len(runs)-1]
	}
	return nil
}

// publish makes the finished index visible under name.
func (b *indexBuilder) publish(name string) error {
	if err := b.f.Sync(); err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	if err := os.Rename(b.f.Name(), name); err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	b.f.Close()
	b.f = nil
	return nil
}

// abort removes whatever was not published.
func (b *indexBuilder) abort() {
	if b.f != nil {
		b.f.Close()
		os.Remove(b.f.Name())
		b.f = nil
	}
	for _, f := range []*os.File{b.places, b.parents, b.counts} {
		if f != nil {
			f.Close()
		}
	}
}
