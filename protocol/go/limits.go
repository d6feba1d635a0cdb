// Limits: how much of an answer this client reads. Anything on the pod network can answer at a pod's
// address, so every answer is read with a bound and going past it is a *LimitError, never an
// allocation that grows with what the peer sends. Time is bounded by the caller's context.

package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DefaultMaxAnswerBytes bounds one JSON answer (and the metrics) unless Client.MaxAnswerBytes says
// otherwise. The largest legitimate answers at the shim's defaults (PROTOCOL.md sections 4 and 7),
// every field at its widest (TestLargestAnswersFit builds them): GET /v1/processes with
// STEPSHIM_MAX_PROCESSES (4096) processes of 423 bytes each (a 128-byte id) is 1.65 MiB; GET
// /v1/pulls with its 256 remembered pulls, each with a 4096-byte path and target and a 512-byte
// quoted error of control bytes, is 2.9 MiB; GET /v1/grants with STEPSHIM_MAX_GRANTS (64) grants of
// 4096-byte paths is 0.26 MiB. 4 MiB holds each; a caller whose shims are configured for more
// processes or grants raises it by 512 bytes per process or 4.5 KiB per grant.
const DefaultMaxAnswerBytes = 4 << 20

// MaxErrorBodyBytes bounds the body of an error answer; the shim's are well under 1 KiB. A longer
// one is cut there (APIError.Truncated) and its connection closed rather than drained.
const MaxErrorBodyBytes = 64 << 10

// MaxDrainBytes is how much of an answer's unread rest is read so that its connection can carry the
// next request; a longer rest closes the connection instead.
const MaxDrainBytes = 4 << 10

// MaxHeaderBytes bounds the status line and headers of an answer (http.Transport's
// MaxResponseHeaderBytes) for clients made by New; the shim's heads are a few hundred bytes.
const MaxHeaderBytes = 64 << 10

// ErrAnswerTooLarge matches (with errors.Is) a *LimitError and an APIError whose body was cut.
var ErrAnswerTooLarge = errors.New("shim answer over the client's limit")

// LimitError is an answer that went past one of this client's limits: the peer is broken or hostile,
// and asking again would get the same. The answer's connection is closed.
type LimitError struct {
	// What was being read: "the answer of GET /v1/processes", "the head of an answer", ...
	What string
	// Limit is the bound in bytes.
	Limit int64
	// Option names the knob that sets the limit, or the constant that is the limit.
	Option string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("shim: %s is over this client's limit of %d bytes (%s): the peer is not a "+
		"well-behaved shim, or the shim is configured for larger answers", e.What, e.Limit, e.Option)
}

// Is makes errors.Is(err, ErrAnswerTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrAnswerTooLarge }

// maxAnswer is the bound on one JSON answer of c.
func (c *Client) maxAnswer() int64 {
	if c.MaxAnswerBytes > 0 {
		return c.MaxAnswerBytes
	}
	return DefaultMaxAnswerBytes
}

// readLimited reads all of r if it holds at most limit bytes, reading at most limit+1 bytes either
// way into a buffer that doubles up to limit+1 (so at most twice that is allocated in all); length
// is the announced Content-Length (-1 if unknown), refused before any read if over.
func readLimited(r io.Reader, length, limit int64, what string) ([]byte, error) {
	if length > limit {
		return nil, &LimitError{What: what, Limit: limit, Option: "Client.MaxAnswerBytes"}
	}
	size := int64(4096)
	if length >= 0 {
		size = length + 1
	}
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, &LimitError{What: what, Limit: limit, Option: "Client.MaxAnswerBytes"}
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// decodeAnswer reads a JSON answer of at most limit bytes from r into out.
func decodeAnswer(r io.Reader, length, limit int64, what string, out any) error {
	b, err := readLimited(r, length, limit, what)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("shim: decoding %s: %w", what, err)
	}
	return nil
}

// drain reads what is left of body, at most MaxDrainBytes, so that a short rest leaves the
// connection reusable; the caller's Close then drops a longer one with its connection.
func drain(body io.Reader) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, MaxDrainBytes))
}

// headTooLarge turns http.Transport's refusal of a head over MaxResponseHeaderBytes, which it
// reports only as text, into a *LimitError.
func headTooLarge(err error) error {
	if err != nil && strings.Contains(err.Error(), "server response headers exceeded") {
		return &LimitError{What: "the head of an answer", Limit: MaxHeaderBytes, Option: "MaxHeaderBytes"}
	}
	return err
}

// errorBody reads the body of an error answer, at most MaxErrorBodyBytes; cut says it was longer.
func errorBody(resp *http.Response) (body []byte, cut bool) {
	body, _ = io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodyBytes+1))
	if len(body) > MaxErrorBodyBytes {
		return body[:MaxErrorBodyBytes], true
	}
	return body, false
}
