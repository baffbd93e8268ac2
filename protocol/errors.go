package protocol

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Code is a stable, machine-readable error code. Its string form is part of the wire protocol and
// of the CLI's output (`error: <code>: <message>`), so existing values never change.
type Code string

const (
	CodeInvalidArgument      Code = "invalid_argument"
	CodeNotFound             Code = "not_found"
	CodeExists               Code = "exists"
	CodeConflict             Code = "conflict"
	CodePathEscape           Code = "path_escape"
	CodeSymlinkRefused       Code = "symlink_refused"
	CodeNotDirectory         Code = "not_directory"
	CodeStaleEpoch           Code = "stale_epoch"
	CodeChangedDuringCapture Code = "changed_during_capture"
	CodeRevoked              Code = "revoked"
	CodeUnauthorized         Code = "unauthorized"
	CodeUnsupported          Code = "unsupported"
	CodeUnavailable          Code = "unavailable"
	CodeTimeout              Code = "timeout"
	CodeCanceled             Code = "canceled"
	CodeFailed               Code = "failed"
	CodeProviderFailed       Code = "provider_failed"
	CodeInternal             Code = "internal"
	CodeInvalidPath          Code = "invalid_path"
	CodeTooLarge             Code = "too_large"
	CodeInvalidRange         Code = "invalid_range"
	CodeGitBusy              Code = "git_busy"
	CodeCorrupt              Code = "corrupt"
	CodeLeaseHeld            Code = "lease_held"
	// CodePermissionDenied: the workspace's own user may not act on that file (the runner acts
	// on files with the agent's rights, never more).
	CodePermissionDenied Code = "permission_denied"
	// CodeReservedName: the workspace holds a name the snapshot format keeps for itself (the
	// manifest's, at the root); saving it fails, naming the file, rather than leave it out.
	CodeReservedName Code = "reserved_name"
	// CodeNoSpace: the target's filesystem has too little free space for what was asked (a
	// restore whose files' length exceeds it is refused before anything is written).
	CodeNoSpace Code = "no_space"
)

// exitCodes gives each code a distinct CLI exit status. 1 is left for "the command itself failed"
// and 2 for usage errors, like most Unix tools; exec passes the remote command's status through.
// Values stay below 126 so they never look like a shell's "not executable" or a signal, but for
// canceled: 130 is what a shell reports for a command Ctrl-C (SIGINT) ended, which is what an
// interrupted CLI is, and exec exits 130 the same way for a remote command the interrupt killed.
var exitCodes = map[Code]int{
	CodeInvalidArgument:      2,
	CodeNotFound:             3,
	CodeExists:               4,
	CodeConflict:             5,
	CodePathEscape:           6,
	CodeSymlinkRefused:       7,
	CodeNotDirectory:         8,
	CodeStaleEpoch:           9,
	CodeChangedDuringCapture: 10,
	CodeRevoked:              11,
	CodeUnauthorized:         13,
	CodeUnsupported:          14,
	CodeUnavailable:          15,
	CodeTimeout:              124, // what timeout(1) exits with, which scripts already test for
	CodeCanceled:             130, // 128 + SIGINT
	CodeFailed:               18,
	CodeProviderFailed:       19,
	CodeInternal:             20,
	CodeInvalidPath:          21,
	CodeTooLarge:             22,
	CodeInvalidRange:         23,
	CodeGitBusy:              24,
	CodeCorrupt:              25,
	CodeLeaseHeld:            26,
	CodeDigestMismatch:       27,
	CodePermissionDenied:     28,
	CodeReservedName:         30,
	CodeNoSpace:              29,
}

// Codes lists every code that has an exit status, by exit status: the README's table of exit
// statuses is generated from it.
func Codes() []Code {
	out := make([]Code, 0, len(exitCodes))
	for c := range exitCodes {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Code) int { return exitCodes[a] - exitCodes[b] })
	return out
}

// ExitCode is the CLI exit status for an error carrying code c.
func (c Code) ExitCode() int {
	if n, ok := exitCodes[c]; ok {
		return n
	}
	return 1
}

// Known reports whether c is one of the protocol's codes. A code that arrives from elsewhere (a
// runner's answer, another controller's) may be anything: metrics label such codes "other".
func (c Code) Known() bool {
	_, ok := exitCodes[c]
	return ok
}

// Error is the typed error that crosses process boundaries (wire trailers, REST bodies, CLI).
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds a typed error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf finds the typed code in err's chain, or CodeInternal when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return Code(coded.ErrorCode())
	}
	return CodeInternal
}

// AsError turns any error into a wire error, keeping a typed code found anywhere in the chain.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	code := CodeOf(err)
	// Typed errors of other packages often print their code first; do not print it twice.
	return &Error{Code: code, Message: strings.TrimPrefix(err.Error(), string(code)+": ")}
}
