package blobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOModule is the pinned MinIO server `.ci/minio` and `.ci/deps minio` install.
const MinIOModule = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// Server is an S3 endpoint for tests.
type Server struct {
	Endpoint  string // host:port, plain HTTP
	AccessKey string
	SecretKey string
	client    *minio.Client
}

// MinIO returns an S3 server for t. With TETHER_TEST_S3_ENDPOINT set (for example by
// `.ci/minio start`) it uses that server, with TETHER_TEST_S3_ACCESS_KEY/TETHER_TEST_S3_SECRET_KEY
// (default AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY). Otherwise it starts a MinIO server on
// 127.0.0.1 with a temporary directory and stops it when t ends. The binary is `minio` on PATH
// or $(go env GOPATH)/bin/minio; without one the test is skipped, or fails when CI is set.
func MinIO(t testing.TB) *Server {
	t.Helper()
	if ep := os.Getenv("TETHER_TEST_S3_ENDPOINT"); ep != "" {
		s := &Server{Endpoint: ep,
			AccessKey: envOr("TETHER_TEST_S3_ACCESS_KEY", os.Getenv("AWS_ACCESS_KEY_ID")),
			SecretKey: envOr("TETHER_TEST_S3_SECRET_KEY", os.Getenv("AWS_SECRET_ACCESS_KEY"))}
		s.connect(t, nil)
		t.Logf("S3 tests against %s (TETHER_TEST_S3_ENDPOINT)", ep)
		return s
	}
	bin := MinIOBinary()
	if bin == "" {
		msg := "no MinIO server binary (minio on PATH or in $(go env GOPATH)/bin): run `.ci/deps minio` " +
			"(go install " + MinIOModule + ") or set TETHER_TEST_S3_ENDPOINT"
		if ci := os.Getenv("CI"); ci != "" && ci != "0" && ci != "false" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var last error
	for range 3 { // a free port can be taken between probing and binding
		s, err := startMinIO(t, bin)
		if err == nil {
			t.Logf("S3 tests against %s started on %s", bin, s.Endpoint)
			return s
		}
		last = err
	}
	t.Fatalf("starting MinIO: %v", last)
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// MinIOBinary finds the minio server binary, or returns "".
func MinIOBinary() string {
	if p := os.Getenv("TETHER_MINIO_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	gopath := ""
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "minio")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startMinIO(t testing.TB, bin string) (*Server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	console, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &Server{Endpoint: addr, AccessKey: "tether-" + randomHex(4), SecretKey: randomHex(16)}
	logPath := filepath.Join(dir, "minio.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "server", filepath.Join(dir, "data"), "--address", addr,
		"--console-address", console, "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	if err := s.connect(t, exited); err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%v; log:\n%s", err, log)
	}
	t.Cleanup(stop)
	return s, nil
}

// connect makes the admin client and waits (up to a minute) until the server answers; a nil
// exited means an external server, whose failure to answer fails t.
func (s *Server) connect(t testing.TB, exited <-chan struct{}) error {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	s.client = c
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("minio exited")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("S3 server %s not answering: %v", s.Endpoint, err)
			if exited == nil {
				t.Fatal(err)
			}
			return err
		}
	}
}

// Client is an admin client straight to the server (not through any proxy).
func (s *Server) Client() *minio.Client { return s.client }

// NewBucket creates a fresh bucket, emptied and removed when t ends.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	bucket := "tether-test-" + randomHex(6)
	ctx := context.Background()
	if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("MakeBucket %s: %v", bucket, err)
	}
	t.Cleanup(func() {
		for o := range s.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				_ = s.client.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{})
			}
		}
		_ = s.client.RemoveBucket(ctx, bucket)
	})
	return bucket
}
