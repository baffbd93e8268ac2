// Package clusterharness builds real Tether clusters for tests and the bench: several
// controllers (`tether serve`) sharing one PostgreSQL database and one S3 bucket (MinIO), each
// in a network namespace of its own on a test bridge whose links can be cut, behind a real
// HAProxy that clients and runners both dial (New).
//
// Functions take a testing.TB: tests pass theirs, the bench one of its own. Everything New
// starts is stopped and removed when the TB ends. Set BinDir first.
//
// It needs root (namespaces, links), iproute2, haproxy, PostgreSQL's server binaries and MinIO
// (`.ci/deps` installs them); without them New skips the TB, saying what is missing — or fails
// it when CI is set.
package clusterharness
