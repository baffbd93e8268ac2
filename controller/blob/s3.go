package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	defaultPartSizeMiB = 32
	minPartSizeMiB     = 5    // S3's minimum for all parts but the last
	maxPartSizeMiB     = 5120 // S3's maximum part size
	maxS3Name          = 1024
	metaSHA256         = "Tether-Sha256" // user metadata on committed objects: x-amz-meta-tether-sha256
	cleanupTimeout     = time.Minute
)

// maxCopySize is the largest object a single CopyObject may copy (S3's limit); past it Put
// commits with a multipart copy. A variable so tests can take that path with small objects.
var maxCopySize int64 = 5 << 30

// s3Store keeps each object as BUCKET/PREFIX/KEY; temporaries are BUCKET/PREFIX/.tmp/<random>.
type s3Store struct {
	c        *minio.Client
	core     minio.Core
	bucket   string
	prefix   string // "" or "a/b/" (with the slash)
	partSize uint64
	url      string
	options
}

// openS3 parses s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=R&insecure=true&part_size_mib=N
// &max_retries=N and checks that the bucket exists.
func openS3(ctx context.Context, u *url.URL, opts options) (Store, error) {
	bad := func(format string, args ...any) error {
		return errorf(CodeInvalidArgument, nil, "blob store URL %s: %s", redact(u), fmt.Sprintf(format, args...))
	}
	if u.User != nil {
		return nil, bad("credentials go in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, not the URL")
	}
	bucket := u.Host
	if bucket == "" {
		return nil, bad("no bucket")
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := ValidKey(prefix); err != nil {
			return nil, bad("prefix: %v", err)
		}
		if len(prefix) >= maxS3Name-maxKeyLen {
			return nil, bad("prefix longer than %d bytes", maxS3Name-maxKeyLen-1)
		}
		prefix += "/"
	}
	q := u.Query()
	endpoint, region := "s3.amazonaws.com", q.Get("region")
	if e := q.Get("endpoint"); e != "" {
		endpoint = e
	}
	secure := true
	partMiB, retries := uint64(defaultPartSizeMiB), minio.MaxRetry
	for k, v := range q {
		var err error
		switch k {
		case "endpoint", "region":
		case "insecure":
			var insecure bool
			insecure, err = strconv.ParseBool(v[0])
			secure = !insecure
		case "part_size_mib":
			partMiB, err = strconv.ParseUint(v[0], 10, 64)
			if err == nil && (partMiB < minPartSizeMiB || partMiB > maxPartSizeMiB) {
				err = fmt.Errorf("must be %d to %d", minPartSizeMiB, maxPartSizeMiB)
			}
		case "max_retries":
			retries, err = strconv.Atoi(v[0])
			if err == nil && retries < 1 {
				err = errors.New("must be at least 1")
			}
		default:
			err = errors.New("unknown parameter")
		}
		if err != nil {
			return nil, bad("%s: %v", k, err)
		}
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, bad("%v", err)
	}
	c, err := minio.New(endpoint, &minio.Options{
		Transport:       bodyGuard{tr},
		Creds:           credentials.NewEnvAWS(),
		Secure:          secure,
		Region:          region,
		MaxRetries:      retries,
		TrailingHeaders: true, // a CRC32C per part, checked by the server
	})
	if err != nil {
		return nil, bad("%v", err)
	}
	s := &s3Store{c: c, core: minio.Core{Client: c}, bucket: bucket, prefix: prefix,
		partSize: partMiB << 20, url: redact(u), options: opts}
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return nil, s.storeErr(ctx, err, "open: bucket %s", bucket)
	}
	if !ok {
		return nil, errorf(CodeNotFound, nil, "blob store %s: bucket %s does not exist", s.url, bucket)
	}
	return s, nil
}

// redact is the URL without user info (the query holds no secrets).
func redact(u *url.URL) string {
	v := *u
	v.User = nil
	return v.String()
}

func (s *s3Store) String() string { return s.url }

func (s *s3Store) object(key string) string { return s.prefix + key }
func (s *s3Store) tmpPrefix() string        { return s.prefix + tmpDir + "/" }

// storeErr types an S3 error: not_found for a missing key, canceled/timeout for ctx, otherwise
// unavailable with the S3 error in the chain.
func (s *s3Store) storeErr(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if cerr := ctxError(ctx, "blob "+what); cerr != nil {
		return cerr
	}
	resp := minio.ToErrorResponse(err)
	if resp.Code == "NoSuchKey" || resp.Code == "NotFound" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket" {
		return errorf(CodeNotFound, nil, "blob %s", what)
	}
	return errorf(CodeUnavailable, err, "blob %s (%s)", what, s.url)
}

// Put uploads r to a temporary key with an explicit part size (one part buffered at a time),
// checks its size, then copies it server-side to the final key and removes the temporary. The
// temporary is created empty first, so a crash mid-upload leaves a key the startup sweep can find
// and abort uploads for (MinIO lists multipart uploads only by exact key).
func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, want string) (_ Info, err error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	want, err = validWant(want)
	if err != nil {
		return Info{}, err
	}
	if err := ctxError(ctx, "blob put "+key); err != nil {
		return Info{}, err
	}
	tmp := s.tmpPrefix() + randomName()
	final := s.object(key)
	// While the tracker holds tmp, other controllers' sweeps leave it and its upload alone, however
	// long the upload runs. Deferred first, done runs last: after the cleanup below has removed
	// the temporary and aborted its upload (or after the commit's own removal on success).
	defer s.begin(tmp)()
	committed := false
	defer func() {
		if !committed {
			if _, cerr := s.removeTemp(ctx, tmp); cerr != nil {
				err = errors.Join(err, fmt.Errorf("blob put %s: cleanup of %s (left to the startup sweep): %w", key, tmp, cerr))
			}
		}
	}()

	if _, err := s.c.PutObject(ctx, s.bucket, tmp, bytes.NewReader(nil), 0, minio.PutObjectOptions{}); err != nil {
		return Info{}, s.storeErr(ctx, err, "put %s: temporary", key)
	}
	src := newSource(ctx, r)
	_, err = s.c.PutObject(ctx, s.bucket, tmp, src, -1, minio.PutObjectOptions{
		PartSize:    s.partSize, // never the unknown-size default, which buffers 528 MiB
		ContentType: "application/octet-stream",
	})
	if ferr := src.failure(key); ferr != nil {
		return Info{}, ferr
	}
	if err != nil {
		return Info{}, s.storeErr(ctx, err, "put %s: upload", key)
	}
	st, err := s.c.StatObject(ctx, s.bucket, tmp, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.storeErr(ctx, err, "put %s: stat temporary", key)
	}
	sum, err := src.check(key, st.Size, want)
	if err != nil {
		return Info{}, err
	}
	if err := ctxError(ctx, "blob put "+key); err != nil {
		return Info{}, err
	}

	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: final, ReplaceMetadata: true,
		UserMetadata: map[string]string{metaSHA256: sum}}
	srcOpts := minio.CopySrcOptions{Bucket: s.bucket, Object: tmp, MatchETag: st.ETag}
	if st.Size <= maxCopySize {
		_, err = s.c.CopyObject(ctx, dst, srcOpts)
	} else {
		// Past 5 GiB S3 copies only part by part (UploadPartCopy).
		_, err = s.c.ComposeObject(ctx, dst, srcOpts)
		if err != nil {
			cctx, cancel := cleanupContext(ctx)
			_, _ = s.abortUploads(cctx, final, true, time.Time{}, nil)
			cancel()
		}
	}
	// Past this point the work is done server-side; finish (or undo) it even if ctx is canceled.
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	// Verify the committed object. After a failed copy this also catches a copy that happened
	// with only its answer lost.
	info, serr := s.Stat(cctx, key)
	if err != nil && (serr != nil || info.Size != st.Size || info.SHA256 != sum) {
		return Info{}, s.storeErr(ctx, err, "put %s: commit", key)
	}
	if serr == nil && (info.Size != st.Size || info.SHA256 != sum) {
		serr = errorf(CodeCorrupt, nil, "blob put %s: committed %d bytes (SHA-256 %q), uploaded %d (%s)",
			key, info.Size, info.SHA256, st.Size, sum)
	}
	if serr != nil {
		// Unverified: take it back rather than publish it.
		_ = s.c.RemoveObject(cctx, s.bucket, final, minio.RemoveObjectOptions{})
		return Info{}, serr
	}
	committed = true
	// A temporary left by a failure here is the startup sweep's.
	_ = s.c.RemoveObject(cctx, s.bucket, tmp, minio.RemoveObjectOptions{})
	return info, nil
}

// cleanupContext outlives ctx's cancellation: cleaning up after a canceled Put must still run.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// removeTemp aborts tmp's incomplete uploads and removes the object; it counts what it removed.
func (s *s3Store) removeTemp(ctx context.Context, tmp string) (int, error) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	n, err := s.abortUploads(ctx, tmp, true, time.Time{}, nil)
	if rerr := s.c.RemoveObject(ctx, s.bucket, tmp, minio.RemoveObjectOptions{}); rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		n++
	}
	return n, err
}

// abortUploads aborts the incomplete multipart uploads of exactly object, or with exact false of
// every object under that prefix, started before `before` unless it is zero, except the uploads
// of keys live reports true for (nil: none).
func (s *s3Store) abortUploads(ctx context.Context, object string, exact bool, before time.Time, live func(string) bool) (int, error) {
	n := 0
	var errs []error
	for u := range s.c.ListIncompleteUploads(ctx, s.bucket, object, true) {
		if u.Err != nil {
			errs = append(errs, u.Err)
			break
		}
		if exact && u.Key != object || !before.IsZero() && !u.Initiated.Before(before) || isLive(live, u.Key) {
			continue
		}
		if err := s.core.AbortMultipartUpload(ctx, s.bucket, u.Key, u.UploadID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (s *s3Store) info(key string, o minio.ObjectInfo) Info {
	i := Info{Key: key, Size: o.Size, ModTime: o.LastModified}
	for k, v := range o.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			i.SHA256 = v
		}
	}
	return i
}

func (s *s3Store) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	o, err := s.c.StatObject(ctx, s.bucket, s.object(key), minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.storeErr(ctx, err, "%s", key)
	}
	return s.info(key, o), nil
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidKey(key); err != nil {
		return nil, Info{}, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s.storeErr(ctx, err, "%s", key)
	}
	st, err := o.Stat()
	if err != nil {
		_ = o.Close()
		return nil, Info{}, s.storeErr(ctx, err, "%s", key)
	}
	return o, s.info(key, st), nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.object(key), minio.RemoveObjectOptions{}); err != nil {
		if err := s.storeErr(ctx, err, "delete %s", key); IsNotFound(err) {
			return nil
		}
		return err
	}
	return nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	var out []Info
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.object(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, s.storeErr(ctx, o.Err, "list %q", prefix)
		}
		key := strings.TrimPrefix(o.Key, s.prefix)
		if ValidKey(key) != nil { // temporaries, and names this store never writes
			continue
		}
		out = append(out, s.info(key, o))
	}
	return out, nil
}

// SweepTemporaries removes temporaries older than olderThan with their incomplete uploads, then
// aborts any other incomplete upload to a temporary key started before then (where the server
// lists uploads by prefix; MinIO lists them only by exact key, and expires stale ones itself).
// Temporaries live reports true for (their full object names, as Put gave its tracker) and their
// uploads are left alone: their Puts are running, perhaps on another controller. Uploads to other
// keys are left alone: the bucket may be shared. A multipart copy (> 5 GiB) that failed and could
// not be aborted is left to the bucket's AbortIncompleteMultipartUpload lifecycle rule (or
// MinIO's stale-upload expiry).
func (s *s3Store) SweepTemporaries(ctx context.Context, olderThan time.Duration, live func(key string) bool) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	n := 0
	var errs []error
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.tmpPrefix(), Recursive: true}) {
		if o.Err != nil {
			return n, s.storeErr(ctx, o.Err, "sweep")
		}
		if o.LastModified.After(cutoff) || isLive(live, o.Key) {
			continue
		}
		k, err := s.removeTemp(ctx, o.Key)
		n += k
		if err != nil {
			errs = append(errs, err)
		}
	}
	k, err := s.abortUploads(ctx, s.tmpPrefix(), false, cutoff, live)
	n += k
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return n, s.storeErr(ctx, err, "sweep")
	}
	return n, nil
}

// bodyGuard is an http.RoundTripper that stops the transport from reading a request body once
// RoundTrip has returned. net/http may go on reading a body in the background after RoundTrip
// returns (golang/go#51907), while minio-go seeks the same reader back to retry a failed part:
// unguarded, the two race, and the retried part could be sent from a moved reader.
type bodyGuard struct{ base http.RoundTripper }

func (g bodyGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return g.base.RoundTrip(req)
	}
	b := &guardedBody{rc: req.Body}
	r := req.Clone(req.Context())
	r.Body = b
	resp, err := g.base.RoundTrip(r)
	b.finish()
	return resp, err
}

var errBodyAbandoned = errors.New("request body read after its round trip ended")

type guardedBody struct {
	mu   sync.Mutex
	rc   io.ReadCloser
	done bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errBodyAbandoned
	}
	return b.rc.Read(p)
}

func (b *guardedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	return b.rc.Close()
}

// finish waits out a Read in progress and refuses later ones.
func (b *guardedBody) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}
