package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Info describes a committed object.
type Info struct {
	Key     string
	Size    int64
	SHA256  string // hex, of the stored bytes; may be empty where the store does not record it
	ModTime time.Time
}

// Store is a blob store. Keys are relative slash-separated names (see ValidKey).
type Store interface {
	// Put streams r to a temporary object, counting bytes and hashing as they pass; it requires
	// r's EOF, checks the stored size, and only then commits the object under key, replacing any
	// object already there. Any failure (r errors, ctx canceled, size or hash mismatch, store error)
	// leaves no object and no multipart upload behind. want, when not empty, is the expected
	// SHA-256 (hex); a mismatch is an error with code "corrupt" and nothing is committed.
	Put(ctx context.Context, key string, r io.Reader, want string) (Info, error)
	// Get opens a committed object. Info.SHA256 may be empty; readers verify against receipts.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes an object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the committed objects whose keys start with prefix, in key order; never
	// temporaries.
	List(ctx context.Context, prefix string) ([]Info, error)
	// SweepTemporaries removes temporary objects older than olderThan and aborts incomplete
	// multipart uploads started before then (the startup garbage sweep), except those of a
	// temporary for which live reports true: a temporary's age says nothing about whether the
	// Put writing it (another controller's, on a shared store) is still running, so the caller
	// says which are (see UploadTracker for the keys live is given). live may be nil: nothing is
	// live. It returns how many temporaries and uploads it removed.
	SweepTemporaries(ctx context.Context, olderThan time.Duration, live func(key string) bool) (int, error)
	// String is the store's URL form for logs, without secrets.
	String() string
}

// UploadTracker is told of every temporary a Put writes, for as long as it writes it, so that
// controllers sharing a store can tell a running upload from one a crashed Put left behind and
// keep their sweeps (SweepTemporaries' live) off the running ones.
type UploadTracker interface {
	// Begin is called right before Put creates the temporary key, and the done it returns once
	// the temporary is gone or its object committed, on every path (success, failure, cancel),
	// exactly once. A Put that fails before it would create a temporary calls neither. key is the
	// temporary's full name as SweepTemporaries lists it and passes it to live: for an S3 store
	// the object's name in the bucket, the store's prefix included ("PREFIX/.tmp/RANDOM", or
	// ".tmp/RANDOM" without a prefix; its incomplete multipart uploads have the same key); for a
	// directory store the temporary file's absolute path ("DIR/.tmp/RANDOM"). RANDOM is 32 hex
	// digits, fresh for each Put, so a key names one Put. Begin runs on the Put's goroutine and
	// delays it: it should return promptly.
	Begin(key string) (done func())
}

// Option configures a store at Open.
type Option func(*options)

type options struct {
	tracker UploadTracker
}

// WithUploadTracker has every Put report its temporary to t (nil: to no one).
func WithUploadTracker(t UploadTracker) Option {
	return func(o *options) { o.tracker = t }
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// begin reports a temporary to the tracker, if any; the result is the done to call.
func (o options) begin(key string) (done func()) {
	if o.tracker == nil {
		return func() {}
	}
	return o.tracker.Begin(key)
}

// isLive is live(key), with a nil live meaning nothing is live.
func isLive(live func(string) bool, key string) bool {
	return live != nil && live(key)
}

// Error codes, the same strings as the wire protocol's (protocol.Code) so they cross unchanged.
const (
	CodeNotFound        = "not_found"
	CodeInvalidArgument = "invalid_argument"
	CodeCorrupt         = "corrupt"     // stored size or SHA-256 differs from what was sent or wanted
	CodeUnavailable     = "unavailable" // the store could not be reached or refused the request
	CodeCanceled        = "canceled"
	CodeTimeout         = "timeout"
)

// Error is a typed blob-store error; protocol.CodeOf reads its code through ErrorCode.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// ErrorCode lets callers read the typed code without importing this package.
func (e *Error) ErrorCode() string { return e.Code }
func (e *Error) Unwrap() error     { return e.Err }

func errorf(code string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// IsNotFound reports whether err carries the not_found code.
func IsNotFound(err error) bool {
	var coded interface{ ErrorCode() string }
	return errors.As(err, &coded) && coded.ErrorCode() == CodeNotFound
}

// ctxError types a context's error; nil when ctx is still live.
func ctxError(ctx context.Context, what string) error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(CodeTimeout, err, "%s", what)
	default:
		return errorf(CodeCanceled, err, "%s", what)
	}
}

// tmpDir is the reserved first key component under which temporaries live; keys may not use it.
const tmpDir = ".tmp"

const (
	maxKeyLen       = 512 // leaves room for an S3 prefix within S3's 1024-byte names
	maxComponentLen = 255 // a file name's limit on Linux
)

// ValidKey checks a key: 1–512 bytes of [A-Za-z0-9/_.-], slash-separated non-empty components
// of at most 255 bytes, none "." or "..", no leading or trailing "/", and not under the reserved ".tmp/".
func ValidKey(key string) error {
	if key == "" || len(key) > maxKeyLen {
		return errorf(CodeInvalidArgument, nil, "blob key must be 1 to %d bytes", maxKeyLen)
	}
	if err := validName(key, "key"); err != nil {
		return err
	}
	if strings.HasSuffix(key, "/") {
		return errorf(CodeInvalidArgument, nil, "blob key %q ends with /", key)
	}
	if key == tmpDir || strings.HasPrefix(key, tmpDir+"/") {
		return errorf(CodeInvalidArgument, nil, "blob key %q is under the reserved %s/", key, tmpDir)
	}
	return nil
}

// validPrefix checks a List prefix: empty, or like a key but possibly ending with "/".
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > maxKeyLen {
		return errorf(CodeInvalidArgument, nil, "blob prefix longer than %d bytes", maxKeyLen)
	}
	return validName(strings.TrimSuffix(prefix, "/"), "prefix")
}

func validName(name, what string) error {
	if strings.HasPrefix(name, "/") {
		return errorf(CodeInvalidArgument, nil, "blob %s %q starts with /", what, name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '.' || c == '-') {
			return errorf(CodeInvalidArgument, nil, "blob %s %q: character %q not allowed", what, name, c)
		}
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return errorf(CodeInvalidArgument, nil, "blob %s %q: empty, . or .. component", what, name)
		}
		if len(part) > maxComponentLen {
			return errorf(CodeInvalidArgument, nil, "blob %s: component longer than %d bytes", what, maxComponentLen)
		}
	}
	return nil
}

// validWant normalizes an expected SHA-256: empty, or 64 hex digits (returned lower-case).
func validWant(want string) (string, error) {
	if want == "" {
		return "", nil
	}
	if _, err := hex.DecodeString(want); err != nil || len(want) != 2*sha256.Size {
		return "", errorf(CodeInvalidArgument, nil, "expected SHA-256 %q is not 64 hex digits", want)
	}
	return strings.ToLower(want), nil
}

// randomName is a fresh temporary name.
func randomName() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// source wraps a Put's reader: it counts and hashes the bytes as they pass, records whether EOF
// was reached and the first read error, and stops at ctx's cancellation. One goroutine reads it.
type source struct {
	ctx context.Context
	r   io.Reader
	h   hash.Hash
	n   int64
	eof bool
	err error // the first error other than EOF, from r or ctx
}

func newSource(ctx context.Context, r io.Reader) *source {
	return &source{ctx: ctx, r: r, h: sha256.New()}
}

func (s *source) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.eof {
		return 0, io.EOF
	}
	if err := ctxError(s.ctx, "blob put"); err != nil {
		s.err = err
		return 0, err
	}
	n, err := s.r.Read(p)
	if n > 0 {
		s.h.Write(p[:n])
		s.n += int64(n)
	}
	switch {
	case err == io.EOF:
		s.eof = true
	case err != nil:
		s.err = err
	}
	return n, err
}

func (s *source) sum() string { return hex.EncodeToString(s.h.Sum(nil)) }

// failure is the error to report for a source whose reader failed, or nil. The reader's own
// error is kept in the chain so its code (e.g. changed_during_capture) reaches the caller.
func (s *source) failure(key string) error {
	if s.err == nil {
		return nil
	}
	var e *Error
	if errors.As(s.err, &e) && (e.Code == CodeCanceled || e.Code == CodeTimeout) {
		return s.err
	}
	return fmt.Errorf("blob put %s: reading source: %w", key, s.err)
}

// check compares the stored size and the hash with what passed and what was wanted.
func (s *source) check(key string, stored int64, want string) (string, error) {
	if !s.eof {
		return "", errorf(CodeCorrupt, nil, "blob put %s: source not read to its end", key)
	}
	if stored != s.n {
		return "", errorf(CodeCorrupt, nil, "blob put %s: stored %d bytes, sent %d", key, stored, s.n)
	}
	sum := s.sum()
	if want != "" && sum != want {
		return "", errorf(CodeCorrupt, nil, "blob put %s: SHA-256 %s, want %s", key, sum, want)
	}
	return sum, nil
}

// Open opens the store named by rawURL:
//
//	""                     a directory store in defaultDir
//	file:///abs/dir, /abs/dir   a directory store
//	s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=R&insecure=true&part_size_mib=32&max_retries=10
//
// S3 credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func Open(ctx context.Context, rawURL string, defaultDir string, opts ...Option) (Store, error) {
	if rawURL == "" {
		if defaultDir == "" {
			return nil, errorf(CodeInvalidArgument, nil, "no blob store URL and no default directory")
		}
		return OpenDir(defaultDir, opts...)
	}
	if strings.HasPrefix(rawURL, "/") {
		return OpenDir(rawURL, opts...)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, err, "blob store URL")
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, errorf(CodeInvalidArgument, nil, "blob store URL %q: file URLs take no host", rawURL)
		}
		if u.RawQuery != "" || !filepath.IsAbs(u.Path) {
			return nil, errorf(CodeInvalidArgument, nil, "blob store URL %q: want file:///absolute/dir", rawURL)
		}
		return OpenDir(u.Path, opts...)
	case "s3":
		return openS3(ctx, u, collect(opts))
	default:
		return nil, errorf(CodeInvalidArgument, nil, "blob store URL %q: scheme must be file or s3", rawURL)
	}
}
