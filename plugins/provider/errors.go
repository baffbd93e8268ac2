package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/plugins/provider/providerpb"
)

// Error codes. They are plain strings so the controller can pass them on
// unchanged in its own typed errors.
const (
	CodeNotFound           = "not_found"
	CodeInvalidArgument    = "invalid_argument"
	CodeProviderFailed     = "provider_failed"
	CodePathEscape         = "path_escape"
	CodeSymlinkRefused     = "symlink_refused"
	CodeConflict           = "conflict"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnsupported        = "unsupported"
	// CodeForeign refuses an operation on a sandbox the provider did not
	// create (another tool's container, a directory it did not make).
	CodeForeign = "foreign"
	// CodeTooLarge means a transfer would exceed its size limit.
	CodeTooLarge = "too_large"
	// CodeUnavailable means the plugin process could not be reached
	// (it crashed, or was closed).
	CodeUnavailable = "unavailable"
)

// Error is a typed provider failure that survives the plugin boundary.
type Error struct {
	Code    string
	Message string
}

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is(err, &Error{Code: CodeNotFound}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// ErrorCode returns the code of the first *Error in err's chain, or "" if none.
func ErrorCode(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// grpcCode picks the closest gRPC code so generic gRPC tooling (logs,
// interceptors) sees something sensible; the exact code rides in details.
func grpcCode(code string) codes.Code {
	switch code {
	case CodeNotFound:
		return codes.NotFound
	case CodeInvalidArgument, CodePathEscape, CodeSymlinkRefused:
		return codes.InvalidArgument
	case CodeConflict:
		return codes.AlreadyExists
	case CodeFailedPrecondition:
		return codes.FailedPrecondition
	case CodeUnsupported:
		return codes.Unimplemented
	case CodeTooLarge:
		return codes.ResourceExhausted
	case CodeUnavailable:
		return codes.Unavailable
	case CodeForeign:
		return codes.PermissionDenied
	default:
		return codes.Internal
	}
}

// toStatus converts a provider error into a gRPC status error carrying the
// typed code. Errors that are not *Error become CodeProviderFailed with their
// full text, so the operator still sees what went wrong.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	pe := &Error{Code: CodeProviderFailed, Message: err.Error()}
	var typed *Error
	if errors.As(err, &typed) {
		// Keep the context the provider wrapped around the typed error,
		// without repeating the code inside the message.
		pe = &Error{Code: typed.Code, Message: strings.Replace(err.Error(), typed.Error(), typed.Message, 1)}
	}
	st := status.New(grpcCode(pe.Code), pe.Message)
	withDetails, derr := st.WithDetails(&providerpb.Error{Code: pe.Code, Message: pe.Message})
	if derr != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// fromStatus turns an error from a gRPC call back into *Error. Context
// cancellation is returned as the caller's ctx.Err() so errors.Is works.
func fromStatus(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("provider %s: %w", method, err)
	}
	for _, d := range st.Details() {
		if pe, ok := d.(*providerpb.Error); ok {
			return &Error{Code: pe.GetCode(), Message: pe.GetMessage()}
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("provider %s: %w", method, ctxErr)
		}
		// The caller's ctx is fine, so the connection itself was closed.
		if st.Code() == codes.Canceled {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("provider %s: %s", method, st.Message())}
		}
	case codes.Unavailable:
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("provider %s: %s", method, st.Message())}
	case codes.Unimplemented:
		return &Error{Code: CodeUnsupported, Message: fmt.Sprintf("provider %s: %s", method, st.Message())}
	}
	return &Error{Code: CodeProviderFailed, Message: fmt.Sprintf("provider %s: %s", method, st.Message())}
}

// ErrorCode lets callers outside this package read the typed code without importing it.
func (e *Error) ErrorCode() string { return e.Code }
