package blob

// SetMaxCopySize lowers the single-copy limit so tests can commit through a multipart copy.
func SetMaxCopySize(n int64) (restore func()) {
	old := maxCopySize
	maxCopySize = n
	return func() { maxCopySize = old }
}
