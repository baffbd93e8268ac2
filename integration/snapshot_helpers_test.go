package integration

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/tetherhq/tether/controller/blob/blobtest"
)

// listArchive reads a .tar.zst the way `zstd -d | tar -t` would and returns its entry names.
func listArchive(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		names = append(names, h.Name)
	}
}

// s3Store is a bucket on a real MinIO server for one test.
type s3Store struct {
	srv    *blobtest.Server
	bucket string
	url    string // the --blobs URL
}

func minioFor(t *testing.T) *s3Store {
	srv := blobtest.MinIO(t)
	bucket := srv.NewBucket(t)
	// The controller reads credentials from the standard variables, like every S3 tool.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	return &s3Store{srv: srv, bucket: bucket,
		url: "s3://" + bucket + "/tether?endpoint=" + srv.Endpoint + "&insecure=true&part_size_mib=5"}
}

// object reads a stored object's raw bytes.
func (s *s3Store) object(t *testing.T, key string) []byte {
	t.Helper()
	o, err := s.srv.Client().GetObject(context.Background(), s.bucket, "tether/"+key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
