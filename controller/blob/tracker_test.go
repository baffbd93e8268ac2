package blob_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/blob/blobtest"
)

// recordingTracker is an UploadTracker that remembers the temporaries Puts hold, and checks that
// every Begin gets exactly one done.
type recordingTracker struct {
	mu     sync.Mutex
	active map[string]int // key → Begins not yet done
	begins int
	dones  int
	extra  []string    // keys whose done came once too often
	begun  chan string // each Begin's key, for a test to wait on (dropped when full)
}

func newRecordingTracker() *recordingTracker {
	return &recordingTracker{active: map[string]int{}, begun: make(chan string, 64)}
}

func (r *recordingTracker) Begin(key string) func() {
	r.mu.Lock()
	r.active[key]++
	r.begins++
	r.mu.Unlock()
	select {
	case r.begun <- key:
	default:
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.dones++
		if r.active[key] == 0 {
			r.extra = append(r.extra, key)
			return
		}
		if r.active[key]--; r.active[key] == 0 {
			delete(r.active, key)
		}
	}
}

// live is the tracker's set as SweepTemporaries takes it.
func (r *recordingTracker) live(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[key] > 0
}

// check fails t unless there were begins Begins, each with its one done.
func (r *recordingTracker) check(t *testing.T, begins int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begins != begins || r.dones != r.begins || len(r.active) != 0 || len(r.extra) != 0 {
		t.Fatalf("tracker: %d Begins (want %d), %d dones, still active %v, done twice %q",
			r.begins, begins, r.dones, r.active, r.extra)
	}
}

// trackerStore is one kind of store for the tracker tests.
type trackerStore struct {
	open func(t *testing.T, tr blob.UploadTracker) blob.Store
	// tmpPrefix is how the tracker's keys (the temporaries' full names) begin.
	tmpPrefix func(t *testing.T, st blob.Store) string
	// held lists what the store holds for a temporary: its object or file and, in S3, its
	// multipart uploads.
	held      func(t *testing.T, st blob.Store, key string) []string
	plant     func(t *testing.T, st blob.Store)
	leftovers func(t *testing.T, st blob.Store) []string
	faults    []blobtest.Fault // failures to inject mid-Put (S3 only)
	inject    func(faults ...blobtest.Fault)
}

func dirTrackerStore() trackerStore {
	return trackerStore{
		open: func(t *testing.T, tr blob.UploadTracker) blob.Store {
			st, err := blob.OpenDir(filepath.Join(t.TempDir(), "blobs"), blob.WithUploadTracker(tr))
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		tmpPrefix: func(t *testing.T, st blob.Store) string { return filepath.Join(dirOf(t, st), ".tmp") + "/" },
		held: func(t *testing.T, st blob.Store, key string) []string {
			if _, err := os.Stat(key); err != nil {
				return nil
			}
			return []string{"file " + key}
		},
		plant:     dirPlant,
		leftovers: dirLeftovers,
	}
}

func (e *s3Env) trackerStore() trackerStore {
	return trackerStore{
		open: func(t *testing.T, tr blob.UploadTracker) blob.Store {
			return e.open(t, "max_retries=2", blob.WithUploadTracker(tr))
		},
		tmpPrefix: func(*testing.T, blob.Store) string { return "snap/shots/.tmp/" },
		held: func(t *testing.T, st blob.Store, key string) []string {
			ctx := context.Background()
			c, bucket := e.srv.Client(), e.bucket(st)
			var out []string
			if _, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err == nil {
				out = append(out, "object "+key)
			}
			for u := range c.ListIncompleteUploads(ctx, bucket, key, true) {
				if u.Err != nil {
					t.Fatal(u.Err)
				}
				out = append(out, "upload "+u.Key+" "+u.UploadID)
			}
			return out
		},
		plant:     e.plant,
		leftovers: e.leftovers,
		faults: []blobtest.Fault{
			{Op: blobtest.OpPutObject},           // creating the temporary
			{Op: blobtest.OpUploadPart, Part: 2}, // mid-upload
			{Op: blobtest.OpComplete},            // finishing the upload
			{Op: blobtest.OpCopyObject},          // the commit
			{Op: blobtest.OpStatObject},          // checking the temporary
		},
		inject: e.proxy.Inject,
	}
}

const (
	putSize = 7 << 20
	// headSize is a whole 5 MiB part and a byte: once the S3 store has taken it, its multipart
	// upload exists and holds a part, as a long upload's would.
	headSize = 5<<20 + 1
)

// pendingPut is a Put reading from a pipe the test holds open.
type pendingPut struct {
	tmp  string // the temporary's key, as the tracker was told
	pw   *io.PipeWriter
	rest []byte
	done chan struct{} // closed when Put has returned
	info blob.Info
	err  error
}

var errPutReturned = errors.New("the Put returned")

// startPut starts a Put of data and returns once the store has taken in its first headSize bytes
// and asked for more, with the upload still open.
func startPut(t *testing.T, st blob.Store, tr *recordingTracker, key string, data []byte) *pendingPut {
	t.Helper()
	pr, pw := io.Pipe()
	p := &pendingPut{pw: pw, rest: data[headSize:], done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.info, p.err = st.Put(context.Background(), key, pr, blobtest.SHA256(data))
		pr.CloseWithError(errPutReturned) // a Put that failed reads no more: unblock the writer
	}()
	t.Cleanup(func() {
		pw.CloseWithError(errors.New("test ended"))
		<-p.done
	})
	select {
	case p.tmp = <-tr.begun:
	case <-p.done:
		t.Fatalf("Put returned before telling the tracker: %v", p.err)
	case <-time.After(time.Minute):
		t.Fatal("Put never called Begin")
	}
	if _, err := pw.Write(data[:headSize]); err != nil {
		<-p.done
		t.Fatalf("writing the head: %v (Put: %v)", err, p.err)
	}
	// An empty write returns only when the store reads again, so it has done with the head:
	// written it to the temporary file, or uploaded the first part (its last byte went to the
	// second).
	if _, err := pw.Write(nil); err != nil {
		<-p.done
		t.Fatalf("waiting for the store to read on: %v (Put: %v)", err, p.err)
	}
	return p
}

// finish sends the rest of the data and the EOF and returns what Put returned.
func (p *pendingPut) finish() (blob.Info, error) {
	_, _ = p.pw.Write(p.rest) // errPutReturned when the Put has already failed
	_ = p.pw.Close()
	<-p.done
	return p.info, p.err
}

func forEachTrackerStore(t *testing.T, test func(t *testing.T, ks trackerStore)) {
	t.Run("Dir", func(t *testing.T) { test(t, dirTrackerStore()) })
	t.Run("S3", func(t *testing.T) { test(t, newS3Env(t).trackerStore()) })
}

// TestSweepKeepsLiveUpload: a sweep that would remove every temporary (olderThan 0) but is told
// which are live removes a crashed Put's and leaves a running Put's, which then commits.
func TestSweepKeepsLiveUpload(t *testing.T) {
	forEachTrackerStore(t, func(t *testing.T, ks trackerStore) {
		tr := newRecordingTracker()
		st := ks.open(t, tr)
		data := blobtest.RandomBytes(putSize, 21)
		p := startPut(t, st, tr, "live/snap.tar.zst", data)
		if !strings.HasPrefix(p.tmp, ks.tmpPrefix(t, st)) {
			t.Fatalf("Begin(%q): not under %q", p.tmp, ks.tmpPrefix(t, st))
		}
		before := ks.held(t, st, p.tmp)
		if len(before) == 0 || ks.faults != nil && len(before) != 2 {
			t.Fatalf("mid-Put the store holds %q for %s; want the temporary (and in S3 its upload)", before, p.tmp)
		}
		ks.plant(t, st)
		n, err := st.SweepTemporaries(context.Background(), 0, tr.live)
		if err != nil || n < 1 {
			t.Fatalf("SweepTemporaries = %d, %v; want the planted temporary removed", n, err)
		}
		if after := ks.held(t, st, p.tmp); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Fatalf("the sweep took the live Put's %q; left %q", before, after)
		}
		info, err := p.finish()
		if err != nil || info.Size != putSize || info.SHA256 != blobtest.SHA256(data) {
			t.Fatalf("Put after the sweep = %+v, %v", info, err)
		}
		rc, _, err := st.Get(context.Background(), "live/snap.tar.zst")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get: %d bytes, %v; want the %d put", len(got), err, len(data))
		}
		tr.check(t, 1)
		if left := ks.leftovers(t, st); len(left) > 0 {
			t.Fatalf("left behind: %q", left)
		}
	})
}

// TestSweepAbortsUntrackedUpload is the same sweep told of no live upload: it takes the running
// Put's temporary (and upload), and the Put fails. This is what TestSweepKeepsLiveUpload guards
// against, so a store ignoring live would fail there.
func TestSweepAbortsUntrackedUpload(t *testing.T) {
	forEachTrackerStore(t, func(t *testing.T, ks trackerStore) {
		tr := newRecordingTracker()
		st := ks.open(t, tr)
		data := blobtest.RandomBytes(putSize, 22)
		p := startPut(t, st, tr, "live/snap.tar.zst", data)
		n, err := st.SweepTemporaries(context.Background(), 0, nil)
		if err != nil || n < 1 {
			t.Fatalf("SweepTemporaries = %d, %v; want the running Put's temporary removed", n, err)
		}
		if left := ks.held(t, st, p.tmp); len(left) > 0 {
			t.Fatalf("the sweep left %q", left)
		}
		if info, err := p.finish(); err == nil {
			t.Fatalf("Put survived an untracked sweep: %+v", info)
		} else {
			t.Logf("Put: %v", err)
		}
		if _, err := st.Stat(context.Background(), "live/snap.tar.zst"); blobtest.Code(err) != blob.CodeNotFound {
			t.Fatalf("Stat after the failed Put: %v", err)
		}
		tr.check(t, 1)
		if left := ks.leftovers(t, st); len(left) > 0 {
			t.Fatalf("left behind: %q", left)
		}
	})
}

type doneCase struct {
	name   string
	ctx    context.Context // nil: Background
	key    string          // "": "k"
	r      io.Reader
	want   string
	fault  *blobtest.Fault
	begins int  // Begins expected: 1, or 0 when the Put fails before it would create a temporary
	ok     bool // the Put succeeds
}

// TestTrackerDoneOnEveryPath: every Put that created a temporary calls done exactly once,
// whether it committed or failed and wherever it failed; one that failed before creating it
// calls neither Begin nor done.
func TestTrackerDoneOnEveryPath(t *testing.T) {
	forEachTrackerStore(t, func(t *testing.T, ks trackerStore) {
		data := blobtest.RandomBytes(12<<20, 23)
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		cases := []doneCase{
			{name: "Committed", r: bytes.NewReader(data), want: blobtest.SHA256(data), begins: 1, ok: true},
			{name: "Empty", r: bytes.NewReader(nil), begins: 1, ok: true},
			{name: "WantMismatch", r: bytes.NewReader(data), want: blobtest.SHA256(nil), begins: 1},
			{name: "ReaderFails", r: io.MultiReader(bytes.NewReader(data[:6<<20]), iotest.ErrReader(errors.New("boom"))), begins: 1},
			{name: "CanceledBefore", ctx: canceled, r: bytes.NewReader(data)},
			{name: "InvalidKey", key: ".tmp/x", r: bytes.NewReader(data)},
		}
		for _, f := range ks.faults {
			cases = append(cases, doneCase{name: "Fault" + string(f.Op), r: bytes.NewReader(data), fault: &f, begins: 1})
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tr := newRecordingTracker()
				st := ks.open(t, tr)
				ctx, key := tc.ctx, tc.key
				if ctx == nil {
					ctx = context.Background()
				}
				if key == "" {
					key = "k"
				}
				if tc.fault != nil {
					ks.inject(*tc.fault)
				}
				_, err := st.Put(ctx, key, tc.r, tc.want)
				if tc.fault != nil {
					ks.inject()
				}
				if (err == nil) != tc.ok {
					t.Fatalf("Put: %v; want success %v", err, tc.ok)
				}
				tr.check(t, tc.begins)
				if left := ks.leftovers(t, st); len(left) > 0 {
					t.Fatalf("left behind: %q", left)
				}
			})
		}
	})
}
