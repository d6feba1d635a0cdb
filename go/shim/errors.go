// Errors: the shim's error answers (PROTOCOL.md section 3) as *APIError, and the functions that classify
// them. Codes this package does not know are classified by HTTP status, as the protocol requires.

package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error codes of PROTOCOL.md section 3.
const (
	CodeBadRequest         = "bad_request"
	CodeInvalidJSON        = "invalid_json"
	CodeInvalidSpec        = "invalid_spec"
	CodeInvalidID          = "invalid_id"
	CodeInvalidOffset      = "invalid_offset"
	CodeInvalidSignal      = "invalid_signal"
	CodeInvalidPath        = "invalid_path"
	CodeInvalidTar         = "invalid_tar"
	CodeUnauthorized       = "unauthorized"
	CodeNoRoute            = "no_route"
	CodeProcessNotFound    = "process_not_found"
	CodeFileNotFound       = "file_not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeSpecConflict       = "spec_conflict"
	CodeStillRunning       = "still_running"
	CodeNotRunning         = "not_running"
	CodeNoTTY              = "no_tty"
	CodeNoStdin            = "no_stdin"
	CodeStdinGap           = "stdin_gap"
	CodeStdinClosed        = "stdin_closed"
	CodeBodyTooLarge       = "body_too_large"
	CodeExecutableNotFound = "executable_not_found"
	CodeInvalidSpawn       = "invalid_spawn"
	CodeInternal           = "internal"
	CodeUnavailable        = "unavailable"
	// Artifacts (PROTOCOL.md 4.8.1, 4.10, 4.11).
	CodeForbidden          = "forbidden"
	CodeOwnerNotPermitted  = "owner_not_permitted"
	CodeNotFound           = "not_found"
	CodePreconditionFailed = "precondition_failed"
	// Properties (PROTOCOL.md 4.13).
	CodeInvalidProperty = "invalid_property"
	CodePropertiesFull  = "properties_full"
)

// ErrExecutableNotFound matches (with errors.Is) the shim's 422 executable_not_found: the path of a
// spawn does not exist or cannot be executed, and nothing was recorded.
var ErrExecutableNotFound = errors.New("executable not found")

// ErrInvalidID is returned, before any request, for a process id the protocol does not allow.
var ErrInvalidID = errors.New("invalid process id")

// ErrShimRestarted is returned by the resuming loops when the shim's boot id changed: every process
// it knew is gone.
var ErrShimRestarted = errors.New("shim restarted")

// APIError is an error answer of the shim: a non-2xx status with its JSON error body.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the protocol's error code; empty if the body was not the protocol's.
	Code string
	// Message is for people and logs, never to be parsed.
	Message string
	// Truncated says the body went past MaxErrorBodyBytes: Message holds its start, and errors.Is
	// with ErrAnswerTooLarge is true.
	Truncated bool
}

func (e *APIError) Error() string {
	if e.Code == CodeNoRoute {
		return fmt.Sprintf("shim: no_route (HTTP %d): %s: the shim is older than this client and lacks "+
			"this route; upgrade the shim image to use it", e.Status, e.Message)
	}
	if e.Code == "" {
		return fmt.Sprintf("shim: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("shim: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrExecutableNotFound) true for an executable_not_found answer, and
// errors.Is(err, ErrAnswerTooLarge) for a truncated body.
func (e *APIError) Is(target error) bool {
	return target == ErrExecutableNotFound && e.Code == CodeExecutableNotFound ||
		target == ErrAnswerTooLarge && e.Truncated
}

// HasCode reports whether err is an APIError with this code.
func HasCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}

func hasStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}

// IsNotFound reports whether err says a process or file does not exist (a 404 other than no_route,
// which means the shim does not know the route at all).
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound && e.Code != CodeNoRoute
}

// IsConflict reports whether err is a 409: the request does not fit the process's state.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsUnauthorized reports whether err is a 401: the token is missing or wrong.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsExecutableNotFound reports whether err is a 422 executable_not_found.
func IsExecutableNotFound(err error) bool { return errors.Is(err, ErrExecutableNotFound) }

// retryable reports whether a loop that can safely repeat its request should do so after err: any
// transport error, and 5xx answers (the shim failing or out of a resource). Answers the shim gave
// deliberately (4xx), a peer whose TLS key is not the pinned one (another pod now holds the address,
// or something impersonates the shim) and the end of the context are final.
func retryable(err error) bool {
	if err == nil || errors.Is(err, ErrShimRestarted) || errors.Is(err, ErrPinMismatch) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var e *APIError
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	var fe *FrameError
	var le *LimitError
	return !errors.As(err, &fe) && !errors.As(err, &le)
}

// readAPIError turns a non-2xx response into an *APIError, reading at most MaxErrorBodyBytes of its
// body; the caller's Close drops the rest with the connection.
func (c *Client) readAPIError(resp *http.Response) error {
	body, cut := c.errorBody(resp)
	var wire struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &APIError{Status: resp.StatusCode, Truncated: cut}
	if cut {
		e.Message = fmt.Sprintf("error body over %d bytes (MaxErrorBodyBytes), starting %q",
			MaxErrorBodyBytes, body[:min(len(body), 256)])
	} else if json.Unmarshal(body, &wire) == nil && wire.Error.Code != "" {
		e.Code, e.Message = wire.Error.Code, wire.Error.Message
	} else {
		e.Message = string(body)
	}
	return e
}
