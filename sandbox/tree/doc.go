// Package tree moves whole directory trees in and out of a workspace as
// PAX tar streams, optionally zstd-compressed. Extract publishes nothing
// until the entire stream has been read and materialized; Write is the
// host-side counterpart the CLI uses to send a source directory.
package tree
