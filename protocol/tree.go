package protocol

// OpTreeExport streams a tar of one workspace path (a directory with everything beneath it, a
// file, or a symlink as a link) to the controller. The runner answers a trailer whose Result is
// the path's FileInfo (or the refusal), then a body (body.go) carrying a plain PAX tar whose
// entries are named TreeExportArgs.Name and Name/…, then a final trailer
// carrying the TreeExportResult. A failure half-way (a file changed while it was read) aborts
// the body with its error instead (BodyWriter.Abort). The tar's end marker is part of the body
// only when the whole tree was read.
const OpTreeExport = "tree_export"

// TreeExportArgs are the arguments of OpTreeExport.
type TreeExportArgs struct {
	Path string `json:"path"`           // workspace-relative
	Name string `json:"name,omitempty"` // the archive name of Path itself; default its base name
}

// MaxExportSkippedNames bounds the skipped names a TreeExportResult lists.
const MaxExportSkippedNames = 100

// TreeExportResult is the final trailer's result of OpTreeExport.
type TreeExportResult struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// Skipped counts the sockets, fifos and devices left out; SkippedNames names the first
	// MaxExportSkippedNames of them.
	Skipped      int      `json:"skipped,omitempty"`
	SkippedNames []string `json:"skipped_names,omitempty"`
}
