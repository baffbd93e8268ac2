// Package runlog keeps a run's output: per stream (stdout, stderr) a bounded, append-only byte
// log with absolute offsets, so a reader can continue exactly where it stopped and is told
// exactly which bytes are no longer held.
//
// Each stream is a sequence of segment files named by their start offset. Writes go through to
// the file and reads read it back: the kernel's page cache is the memory ring (recent output is
// served from memory), the files are the spill, and the bounds below keep both finite. Dropping
// a stream's oldest segment moves its Start. A Store bounds every log it made: each to a per-run
// budget (its oldest segments dropped first) and all of them together to a per-sandbox budget
// (finished logs' segments dropped before running ones', oldest first).
package runlog
