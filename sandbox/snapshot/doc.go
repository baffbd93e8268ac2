// Package snapshot writes and reads workspace snapshot archives: a PAX tar
// stream in lexical path order (regular files, directories, symlinks as
// links, modes and mtimes; .git as the files it is, never followed
// elsewhere), compressed with zstd, whose last entry is a JSON manifest
// describing every other entry. Capture streams the archive without
// staging anything on disk; Restore extracts into a staging directory,
// verifies every entry against the manifest and only then publishes.
package snapshot
