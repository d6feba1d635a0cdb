// Limits: how much of an answer this client reads, and for how long. Anything on the pod network can
// answer at a pod's address, so every answer is read with a bound and going past it is a
// *LimitError, never an allocation that grows with what the peer sends; an answer the client reads
// whole (JSON, metrics, error bodies) must end within Client.AnswerTimeout of its head, else it is
// a *StallError. Waiting for the head is bounded by the caller's context.

package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultMaxAnswerBytes bounds one JSON answer (and the metrics) unless Client.MaxAnswerBytes says
// otherwise. The largest legitimate answers at the shim's defaults (PROTOCOL.md sections 4 and 7),
// every field at its widest (TestLargestAnswersFit builds them): GET /v1/processes with
// STEPSHIM_MAX_PROCESSES (4096) processes of 442 bytes each (a 128-byte id) is 1.73 MiB; GET
// /v1/pulls with its 256 remembered pulls, each with a 4096-byte path and target and a 512-byte
// quoted error of control bytes, is 2.9 MiB; GET /v1/grants with STEPSHIM_MAX_GRANTS (64) grants of
// 4096-byte paths is 0.26 MiB. 4 MiB holds each; a caller whose shims are configured for more
// processes or grants raises it by 512 bytes per process or 4.5 KiB per grant. Properties reads
// up to DefaultMaxPropertiesAnswerBytes when that is more.
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

// DefaultAnswerTimeout is how long an answer read whole may take from its head to its end unless
// Client.AnswerTimeout says otherwise: the shim writes such an answer at once, a few MiB at most.
const DefaultAnswerTimeout = 30 * time.Second

// ErrAnswerStalled matches (with errors.Is) a *StallError.
var ErrAnswerStalled = errors.New("shim answer stalled")

// StallError is an answer read whole that did not end within Client.AnswerTimeout of its head: the
// peer dribbles it or stopped. Its connection is closed; the loops retry it like a broken one.
type StallError struct {
	// What was being read.
	What string
	// After is the timeout that ended it.
	After time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("shim: %s did not end within %v of its head (Client.AnswerTimeout)", e.What, e.After)
}

// Is makes errors.Is(err, ErrAnswerStalled) true.
func (e *StallError) Is(target error) bool { return target == ErrAnswerStalled }

// guardedBody is the body of an answer sent by Client.send: its request's context ends with Close,
// or when a read armed by deadline has not ended in time.
type guardedBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (b *guardedBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// deadline ends the request after d unless the returned stop is called first.
func (b *guardedBody) deadline(d time.Duration, what string) (stop func() bool) {
	return time.AfterFunc(d, func() { b.cancel(&StallError{What: what, After: d}) }).Stop
}

// stalled returns the *StallError that ended the request, if one did, else err.
func (b *guardedBody) stalled(err error) error {
	var se *StallError
	if err != nil && errors.As(context.Cause(b.ctx), &se) {
		return se
	}
	return err
}

// readWhole reads resp's body within c's size and time bounds.
func (c *Client) readWhole(resp *http.Response, what string) ([]byte, error) {
	return c.readWholeUpTo(resp, what, c.maxAnswer())
}

// readWholeUpTo is readWhole with another bound than Client.MaxAnswerBytes.
func (c *Client) readWholeUpTo(resp *http.Response, what string, limit int64) ([]byte, error) {
	body, ok := resp.Body.(*guardedBody)
	if !ok {
		return readLimited(resp.Body, resp.ContentLength, limit, what)
	}
	defer body.deadline(c.answerTimeout(), what)()
	b, err := readLimited(body, resp.ContentLength, limit, what)
	return b, body.stalled(err)
}

// answerTimeout is Client.AnswerTimeout or its default.
func (c *Client) answerTimeout() time.Duration {
	if c.AnswerTimeout > 0 {
		return c.AnswerTimeout
	}
	return DefaultAnswerTimeout
}

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

// decodeJSON decodes a JSON answer read by readWhole into out.
func (c *Client) decodeJSON(resp *http.Response, what string, out any) error {
	b, err := c.readWhole(resp, what)
	if err != nil {
		return err
	}
	return unmarshal(b, what, out)
}

// decodeAnswer reads a JSON answer of at most limit bytes from r into out.
func decodeAnswer(r io.Reader, length, limit int64, what string, out any) error {
	b, err := readLimited(r, length, limit, what)
	if err != nil {
		return err
	}
	return unmarshal(b, what, out)
}

func unmarshal(b []byte, what string, out any) error {
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("shim: decoding %s: %w", what, err)
	}
	return nil
}

// drain reads what is left of resp's body, at most MaxDrainBytes within the answer timeout, so that
// a short rest leaves the connection reusable; the caller's Close then drops a longer or slower one
// with its connection.
func (c *Client) drain(resp *http.Response) {
	if g, ok := resp.Body.(*guardedBody); ok {
		defer g.deadline(c.answerTimeout(), "a drain")()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxDrainBytes))
}

// headTooLarge turns http.Transport's refusal of a head over MaxResponseHeaderBytes, which it
// reports only as text, into a *LimitError.
func headTooLarge(err error) error {
	if err != nil && strings.Contains(err.Error(), "server response headers exceeded") {
		return &LimitError{What: "the head of an answer", Limit: MaxHeaderBytes, Option: "MaxHeaderBytes"}
	}
	return err
}

// errorBody reads the body of an error answer, at most MaxErrorBodyBytes within the answer
// timeout; cut says it was longer.
func (c *Client) errorBody(resp *http.Response) (body []byte, cut bool) {
	if g, ok := resp.Body.(*guardedBody); ok {
		defer g.deadline(c.answerTimeout(), "an error body")()
	}
	body, _ = io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodyBytes+1))
	if len(body) > MaxErrorBodyBytes {
		return body[:MaxErrorBodyBytes], true
	}
	return body, false
}
