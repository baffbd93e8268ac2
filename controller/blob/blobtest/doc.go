// Package blobtest is the test suite every blob.Store passes, plus the real parts it runs
// against: a MinIO server on 127.0.0.1 and a fault-injecting proxy to put in front of it.
package blobtest
