package blob_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/blob/blobtest"
)

// s3Env is a MinIO server with the fault proxy in front and the stores opened through it.
type s3Env struct {
	srv     *blobtest.Server
	proxy   *blobtest.Proxy
	mu      sync.Mutex
	buckets map[blob.Store]string
}

func newS3Env(t *testing.T) *s3Env {
	srv := blobtest.MinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	return &s3Env{srv: srv, proxy: blobtest.NewProxy(t, srv.Endpoint), buckets: map[blob.Store]string{}}
}

// open makes a store in a fresh bucket, under a prefix, through the proxy, with 5 MiB parts.
func (e *s3Env) open(t *testing.T, params string, opts ...blob.Option) blob.Store {
	t.Helper()
	bucket := e.srv.NewBucket(t)
	u := "s3://" + bucket + "/snap/shots?endpoint=" + e.proxy.Addr + "&insecure=true&part_size_mib=5&" + params
	s, err := blob.Open(context.Background(), u, "", opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	e.mu.Lock()
	e.buckets[s] = bucket
	e.mu.Unlock()
	return s
}

func (e *s3Env) bucket(s blob.Store) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buckets[s]
}

// leftovers lists every object under a .tmp/ and every incomplete upload in s's bucket; MinIO
// lists uploads only by exact key, so it asks for each key the proxy saw as well.
func (e *s3Env) leftovers(t *testing.T, s blob.Store) []string {
	t.Helper()
	ctx := context.Background()
	c, bucket := e.srv.Client(), e.bucket(s)
	var out []string
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if strings.Contains(o.Key, ".tmp/") {
			out = append(out, "object "+o.Key)
		}
	}
	for _, prefix := range append([]string{""}, e.proxy.Keys(bucket)...) {
		for u := range c.ListIncompleteUploads(ctx, bucket, prefix, true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			out = append(out, "upload "+u.Key+" "+u.UploadID)
		}
	}
	return out
}

// plant leaves what a controller killed mid-Put leaves: the temporary marker and an incomplete
// multipart upload with one part.
func (e *s3Env) plant(t *testing.T, s blob.Store) {
	t.Helper()
	ctx := context.Background()
	c, bucket := e.srv.Client(), e.bucket(s)
	key := fmt.Sprintf("snap/shots/.tmp/crashed-%d", time.Now().UnixNano())
	if _, err := c.PutObject(ctx, bucket, key, bytes.NewReader(nil), 0, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	core := minio.Core{Client: c}
	id, err := core.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	part := blobtest.RandomBytes(5<<20, 9)
	if _, err := core.PutObjectPart(ctx, bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
		t.Fatal(err)
	}
	e.proxy.Record(bucket, key)
}

func TestS3Store(t *testing.T) {
	e := newS3Env(t)
	blobtest.Run(t, func(t *testing.T) blob.Store { return e.open(t, "") },
		blobtest.Leftovers(e.leftovers), blobtest.Plant(e.plant))
}

func TestS3String(t *testing.T) {
	e := newS3Env(t)
	s := e.open(t, "region=us-east-1")
	u, err := url.Parse(s.String())
	if err != nil || u.Scheme != "s3" || u.Host != e.bucket(s) || u.Path != "/snap/shots" ||
		u.Query().Get("endpoint") != e.proxy.Addr || strings.Contains(s.String(), e.srv.SecretKey) {
		t.Fatalf("String() = %q, %v", s, err)
	}
	// Objects land under the prefix; the SHA-256 is recorded on the object.
	data := []byte("hello")
	if _, err := s.Put(context.Background(), "a/b", bytes.NewReader(data), ""); err != nil {
		t.Fatal(err)
	}
	st, err := e.srv.Client().StatObject(context.Background(), e.bucket(s), "snap/shots/a/b", minio.StatObjectOptions{})
	if err != nil || st.Size != 5 {
		t.Fatalf("object under the prefix: %+v, %v", st, err)
	}
	if info, err := s.Stat(context.Background(), "a/b"); err != nil || info.SHA256 != blobtest.SHA256(data) {
		t.Fatalf("Stat = %+v, %v; want the SHA-256 recorded", info, err)
	}
	// A missing bucket is not_found at Open.
	_, err = blob.Open(context.Background(), "s3://no-such-bucket-"+strings.ToLower(t.Name())+"?endpoint="+e.srv.Endpoint+"&insecure=true", "")
	if blobtest.Code(err) != blob.CodeNotFound {
		t.Fatalf("Open of a missing bucket: %v", err)
	}
}

// TestS3Faults fails S3 requests mid-Put through the proxy: the Put fails and leaves no object,
// no temporary and no incomplete multipart upload; a transient failure is retried.
func TestS3Faults(t *testing.T) {
	e := newS3Env(t)
	data := blobtest.RandomBytes(23<<20, 11) // five 5 MiB parts
	cases := []struct {
		name   string
		fault  blobtest.Fault
		failOK bool // the Put succeeds (the client retries a transient fault)
		either bool // the Put may succeed or fail, but nothing is left behind either way
	}{
		{"Part3Status500", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 3}, false, false},
		{"Part2ConnectionCut", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 2, Mode: blobtest.CutConnection}, false, false},
		{"Part1Status500", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 1}, false, false},
		{"CompleteStatus500", blobtest.Fault{Op: blobtest.OpComplete}, false, false},
		{"CopyStatus500", blobtest.Fault{Op: blobtest.OpCopyObject}, false, false},
		{"CopyConnectionCut", blobtest.Fault{Op: blobtest.OpCopyObject, Mode: blobtest.CutConnection}, false, false},
		{"MarkerStatus500", blobtest.Fault{Op: blobtest.OpPutObject}, false, false},
		{"Part4Transient", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 4, Times: 1}, true, false},
		{"Part2TransientCut", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 2, Times: 1, Mode: blobtest.CutConnection}, true, false},
		{"Part2ResponseLost", blobtest.Fault{Op: blobtest.OpUploadPart, Part: 2, Mode: blobtest.DropResponse}, false, false},
		// The copy happened; only its answer was lost. Put looks, finds its object and succeeds.
		{"CopyResponseLost", blobtest.Fault{Op: blobtest.OpCopyObject, Mode: blobtest.DropResponse}, true, false},
		{"CompleteResponseLost", blobtest.Fault{Op: blobtest.OpComplete, Mode: blobtest.DropResponse}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := e.open(t, "max_retries=2")
			e.proxy.Inject(tc.fault)
			defer e.proxy.Inject()
			info, err := s.Put(context.Background(), "snap.tar.zst", bytes.NewReader(data), blobtest.SHA256(data))
			if e.proxy.Injected() == 0 {
				t.Fatal("the proxy injected no fault")
			}
			e.proxy.Inject()
			if tc.either && err == nil {
				tc.failOK = true
			}
			if tc.failOK {
				if err != nil || info.SHA256 != blobtest.SHA256(data) {
					t.Fatalf("Put with a transient fault = %+v, %v", info, err)
				}
				rc, _, err := s.Get(context.Background(), "snap.tar.zst")
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				_, err = got.ReadFrom(rc)
				rc.Close()
				if err != nil || !bytes.Equal(got.Bytes(), data) {
					t.Fatalf("Get after a retried part: %d bytes, %v", got.Len(), err)
				}
			} else {
				if err == nil {
					t.Fatalf("Put succeeded despite %+v", tc.fault)
				}
				t.Logf("Put: %v", err)
				if _, err := s.Stat(context.Background(), "snap.tar.zst"); blobtest.Code(err) != blob.CodeNotFound {
					t.Fatalf("Stat after a failed Put: %v", err)
				}
			}
			if left := e.leftovers(t, s); len(left) > 0 {
				t.Fatalf("left behind: %q", left)
			}
			if list, err := s.List(context.Background(), ""); err != nil || len(list) != btoi(tc.failOK) {
				t.Fatalf("List = %+v, %v", list, err)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestS3PutMemory guards the part size: a 96 MiB Put with the default 32 MiB parts must not grow
// the heap anywhere near minio-go's unknown-size default (one 528 MiB buffer).
func TestS3PutMemory(t *testing.T) {
	e := newS3Env(t)
	bucket := e.srv.NewBucket(t)
	s, err := blob.Open(context.Background(), "s3://"+bucket+"?insecure=true&endpoint="+e.srv.Endpoint, "")
	if err != nil {
		t.Fatal(err)
	}
	const size = 96 << 20
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	info, err := s.Put(context.Background(), "big", &zeroes{n: size}, "")
	close(done)
	<-sampled
	if err != nil || info.Size != size {
		t.Fatalf("Put = %+v, %v", info, err)
	}
	grew := int64(peak) - int64(base)
	t.Logf("heap grew by at most %d MiB during a %d MiB Put", grew>>20, size>>20)
	if grew > 160<<20 {
		t.Fatalf("heap grew by %d MiB during the Put; the part size is not bounding memory", grew>>20)
	}
}

// zeroes is n zero bytes, without holding them.
type zeroes struct{ n int }

func (z *zeroes) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	n := min(len(p), z.n)
	clear(p[:n])
	z.n -= n
	return n, nil
}

// TestS3MultipartCopyCommit takes the >5 GiB commit path (UploadPartCopy) with small objects, and
// fails it: the multipart copy is aborted and nothing is left.
func TestS3MultipartCopyCommit(t *testing.T) {
	e := newS3Env(t)
	defer blob.SetMaxCopySize(1 << 20)()
	data := blobtest.RandomBytes(6<<20, 12)
	s := e.open(t, "max_retries=2")
	info, err := s.Put(context.Background(), "big", bytes.NewReader(data), blobtest.SHA256(data))
	if err != nil || info.SHA256 != blobtest.SHA256(data) || info.Size != int64(len(data)) {
		t.Fatalf("Put = %+v, %v", info, err)
	}
	if got, err := s.Stat(context.Background(), "big"); err != nil || got.SHA256 != info.SHA256 {
		t.Fatalf("Stat = %+v, %v; want the SHA-256 recorded through the multipart copy", got, err)
	}
	if left := e.leftovers(t, s); len(left) > 0 {
		t.Fatalf("left behind: %q", left)
	}
	for _, f := range []blobtest.Fault{{Op: blobtest.OpCopyPart}, {Op: blobtest.OpCopyPart, Mode: blobtest.DropResponse}} {
		s := e.open(t, "max_retries=2")
		e.proxy.Inject(f)
		_, err := s.Put(context.Background(), "big", bytes.NewReader(data), "")
		injected := e.proxy.Injected()
		e.proxy.Inject()
		if err == nil || injected == 0 {
			t.Fatalf("Put with %+v: %v (%d injected)", f, err, injected)
		}
		if _, err := s.Stat(context.Background(), "big"); blobtest.Code(err) != blob.CodeNotFound {
			t.Fatalf("Stat after a failed commit: %v", err)
		}
		if left := e.leftovers(t, s); len(left) > 0 {
			t.Fatalf("left behind after %+v: %q", f, left)
		}
	}
}
