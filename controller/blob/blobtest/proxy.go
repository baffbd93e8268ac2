package blobtest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Op is a kind of S3 request the proxy can fail.
type Op string

const (
	OpPutObject  Op = "PutObject"
	OpUploadPart Op = "UploadPart"
	OpComplete   Op = "CompleteMultipartUpload"
	OpCopyObject Op = "CopyObject"
	OpCopyPart   Op = "UploadPartCopy"
	OpStatObject Op = "HeadObject"
	opOther      Op = ""
)

// Mode is how a failed request fails.
type Mode int

const (
	// Status500 answers 500 InternalError (which clients retry).
	Status500 Mode = iota
	// CutConnection reads part of the request body, then closes the connection without answering.
	CutConnection
	// DropResponse passes the request on, then closes the connection instead of answering: the
	// server did the work but the client cannot know.
	DropResponse
)

// Fault fails matching requests.
type Fault struct {
	Op   Op
	Part int // for OpUploadPart and OpCopyPart: fail parts numbered Part and later (0 = all)
	// Times is how many matching requests fail; 0 means every one, so retries fail too.
	Times int
	Mode  Mode
}

// Proxy is an HTTP reverse proxy on 127.0.0.1 in front of an S3 server that injects faults and
// records the object keys requests touched (to look for incomplete uploads by exact key, the
// only way MinIO lists them).
type Proxy struct {
	Addr string // host:port to use as the S3 endpoint

	mu       sync.Mutex
	faults   []*Fault
	injected int
	keys     map[string]map[string]bool // bucket → keys
}

// NewProxy starts a proxy to the S3 server at target (host:port), closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	p := &Proxy{keys: map[string]map[string]bool{}}
	to := &url.URL{Scheme: "http", Host: target}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(to)
			pr.Out.Host = pr.In.Host // the request is signed for the proxy's host
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, part := classify(r)
		p.record(r)
		if f := p.match(op, part); f != nil {
			if f.Mode == DropResponse {
				rp.ServeHTTP(httptest.NewRecorder(), r)
			}
			fail(w, r, f.Mode)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.Addr = strings.TrimPrefix(srv.URL, "http://")
	return p
}

// Inject replaces the proxy's faults; with none, it passes everything through.
func (p *Proxy) Inject(faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
	for _, f := range faults {
		p.faults = append(p.faults, &f)
	}
	p.injected = 0
}

// Injected is how many requests failed since the last Inject.
func (p *Proxy) Injected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected
}

// Keys lists the object keys requests have named in bucket.
func (p *Proxy) Keys(bucket string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for k := range p.keys[bucket] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (p *Proxy) record(r *http.Request) {
	if bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/"); bucket != "" && key != "" {
		p.Record(bucket, key)
	}
}

func (p *Proxy) match(op Op, part int) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.Op != op || part < f.Part || f.Times < 0 {
			continue
		}
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				f.Times = -1 // used up
			}
		}
		p.injected++
		return f
	}
	return nil
}

func classify(r *http.Request) (Op, int) {
	q := r.URL.Query()
	_, upload := q["uploadId"]
	copySource := r.Header.Get("X-Amz-Copy-Source") != ""
	switch {
	case r.Method == http.MethodPut && upload:
		n, _ := strconv.Atoi(q.Get("partNumber"))
		if copySource {
			return OpCopyPart, n
		}
		return OpUploadPart, n
	case r.Method == http.MethodPost && upload:
		return OpComplete, 0
	case r.Method == http.MethodPut && copySource && !upload:
		return OpCopyObject, 0
	case r.Method == http.MethodPut && !upload && len(q) == 0:
		return OpPutObject, 0
	case r.Method == http.MethodHead:
		return OpStatObject, 0
	}
	return opOther, 0
}

func fail(w http.ResponseWriter, r *http.Request, mode Mode) {
	if mode == CutConnection || mode == DropResponse {
		_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>InternalError</Code><Message>injected by the test proxy</Message></Error>`)
}

// Record notes a key as seen, for keys written around the proxy.
func (p *Proxy) Record(bucket, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys[bucket] == nil {
		p.keys[bucket] = map[string]bool{}
	}
	p.keys[bucket][key] = true
}
