// Package stableread tells whether the bytes just read from an open file are one version of it,
// or may be a torn mix of two because the file was rewritten in place while it was read.
//
// Comparing a before and an after stat is not enough, because of how Linux stamps a write:
//
//   - write(2) updates mtime and ctime once, when it starts (file_modified), before it copies any
//     data into the page cache. A write already under way at the first stat has stamped the file
//     already; it keeps changing the bytes while they are read, and the after stat shows nothing
//     new. A reader then takes a torn mix for a consistent copy.
//   - The stamp comes from a coarse clock (one jiffy: 1 to 10 ms) on kernels without multigrain
//     timestamps, and a write does not stamp again when the coarse clock has not moved since the
//     last one: two writes within one tick can leave the times unchanged.
//
// What the kernel does offer is a way to ask whether anyone has the file open for writing: it
// grants an F_SETLEASE F_RDLCK read lease only while nobody does (i_writecount is zero, which a
// shared writable mmap also holds up), and a process that opens the file for writing waits only
// while the lease is held. Taking one and giving it straight back is a probe with no lasting
// effect. Without a writer no write can be in progress, and a later one moves ctime once the
// coarse clock has passed the last change.
//
// So a read is judged stable without reading again when, right after its first stat, nobody had
// the file open for writing and its last change was older than a coarse tick (or, when no lease
// can be had at all, older than a second, longer than any plausible single write). Otherwise,
// which in practice is only for a file changed within the last second or held open by a writer,
// the section is read a second time and both SHA-256s must match; a file changed within the last
// second and still open for writing at the end is refused outright, since its write may still be
// copying and two equal reads would prove nothing. (Stores through a shared writable mapping
// stamp the times only at the first fault after writeback; the lease still counts the mapping as
// a writer, so such a file always gets the second read.) Everything goes through the open
// descriptor: a file is never reopened by name.
package stableread
