package controller

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

var httpStatus = map[protocol.Code]int{
	protocol.CodeInvalidArgument:  http.StatusBadRequest,
	protocol.CodePathEscape:       http.StatusBadRequest,
	protocol.CodeSymlinkRefused:   http.StatusBadRequest,
	protocol.CodeNotDirectory:     http.StatusBadRequest,
	protocol.CodeNotFound:         http.StatusNotFound,
	protocol.CodeExists:           http.StatusConflict,
	protocol.CodeConflict:         http.StatusConflict,
	protocol.CodeStaleEpoch:       http.StatusConflict,
	protocol.CodeLeaseHeld:        http.StatusLocked,
	protocol.CodeUnauthorized:     http.StatusUnauthorized,
	protocol.CodeRevoked:          http.StatusForbidden,
	protocol.CodePermissionDenied: http.StatusForbidden,
	protocol.CodeUnsupported:      http.StatusNotImplemented,
	protocol.CodeUnavailable:      http.StatusServiceUnavailable,
	protocol.CodeTimeout:          http.StatusGatewayTimeout,
	protocol.CodeInvalidPath:      http.StatusBadRequest,
	protocol.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	protocol.CodeInvalidRange:     http.StatusRequestedRangeNotSatisfiable,
}

func writeError(w http.ResponseWriter, err error) {
	e := protocol.AsError(err)
	status, ok := httpStatus[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	noteErrorCode(w, e.Code)
	writeJSON(w, status, api.ErrorBody{Error: *e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidArgument, "request body: %v", err)
	}
	return nil
}

// decodeErrorBody is the typed error of another controller's refusal: its own error when it sent
// one (bounded), unavailable otherwise.
func decodeErrorBody(resp *http.Response) error {
	var body api.ErrorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil && body.Error.Code != "" {
		e := body.Error
		return &e
	}
	return protocol.Errorf(protocol.CodeUnavailable, "peer answered %s", resp.Status)
}
