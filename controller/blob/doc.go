// Package blob stores snapshot archives: a directory on the controller's disk by default, or an
// S3-compatible bucket (minio-go). Both stores write to a temporary object while counting and
// hashing the bytes as they pass, require the source's EOF, check the stored size and only then
// commit the object under its key, so a failed or canceled Put leaves nothing behind (DESIGN.md,
// safety contract 2).
package blob
