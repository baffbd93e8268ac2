package fsguard

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// Error codes. The strings are part of the wire contract: the runner maps
// them one to one onto protocol error codes, so they must never change.
const (
	CodePathEscape      = "path_escape"
	CodeSymlinkRefused  = "symlink_refused"
	CodeNotFound        = "not_found"
	CodeExists          = "exists"
	CodeInvalidArgument = "invalid_argument"
	CodeNotDirectory    = "not_directory"
	CodeInvalidPath     = "invalid_path"
	CodeConflict        = "conflict"
	CodeTooLarge        = "too_large"
	// CodePermissionDenied: the workspace's user may not do this to that file.
	CodePermissionDenied = "permission_denied"
)

// Error is a refusal or failure with a typed code. Path is the
// workspace-relative path as given by the caller.
type Error struct {
	Code    string
	Path    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	s := e.Code
	if e.Path != "" {
		s += ": " + e.Path
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets callers test codes without errors.As: errors.Is(err,
// fs.ErrNotExist) holds for not_found even when the cause was not ENOENT
// (for instance a dangling name found by a directory walk), and
// errors.Is(err, &Error{Code: CodeExists}) matches any error of that code.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotFound
	case fs.ErrExist:
		return e.Code == CodeExists
	}
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code && (t.Path == "" || t.Path == e.Path)
	}
	return false
}

// CodeOf returns the code of the first *Error in err's chain, or "" when
// the error carries no code (an I/O error, a permission error, ...).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code, path, msg string, err error) *Error {
	return &Error{Code: code, Path: path, Message: msg, Err: err}
}

// mapErrno turns a syscall error into a typed error where the errno has a
// meaning the caller can act on; anything else stays an untyped wrapped
// error so that I/O failures are not disguised as refusals.
func mapErrno(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	code := ""
	switch errno {
	case unix.ELOOP:
		code = CodeSymlinkRefused
	case unix.EXDEV:
		// From openat2 with RESOLVE_BENEATH this means the resolution tried
		// to leave the root (an absolute symlink or "..").
		code = CodePathEscape
	case unix.ENOENT:
		code = CodeNotFound
	case unix.EEXIST, unix.ENOTEMPTY:
		code = CodeExists
	case unix.ENOTDIR:
		code = CodeNotDirectory
	case unix.EINVAL, unix.ENAMETOOLONG:
		code = CodeInvalidArgument
	case unix.EACCES, unix.EPERM:
		// The runner acts on files with the agent's ids: what the agent may not change, it
		// may not either (a file another user left, a hard link to one).
		code = CodePermissionDenied
	}
	if code == "" {
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	return newError(code, path, op, err)
}

// ErrorCode lets callers read the typed code without importing this package.
func (e *Error) ErrorCode() string { return e.Code }
