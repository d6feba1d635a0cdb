// Output: one output request (PROTOCOL.md 5.3) as an OutputStream, and Follow, the loop that reads a
// log to its exit frame across broken connections, resuming each time from the last frame boundary.

package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// OutputStream is the answer of one output request: log frames from the requested offset.
type OutputStream struct {
	body io.ReadCloser
	fr   *FrameReader
	// End is the log's end when the answer started (X-Stepshim-Output-End), or -1 if absent.
	End int64
}

// Output sends one GET /v1/processes/{id}/output. offset must be a frame boundary no greater than the
// log's end. Without follow the stream ends at the log's end at the time of the request; with follow
// it carries new frames until the exit frame. The caller closes the stream.
func (c *Client) Output(ctx context.Context, id string, offset int64, follow bool) (*OutputStream, error) {
	path, err := processPath(id, "/output")
	if err != nil {
		return nil, err
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if follow {
		q.Set("follow", "1")
	}
	req, err := c.request(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	end := int64(-1)
	if v := resp.Header.Get("X-Stepshim-Output-End"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			end = n
		}
	}
	return &OutputStream{body: resp.Body, fr: NewFrameReader(resp.Body, offset), End: end}, nil
}

// Next returns the next log frame (keepalives skipped); see FrameReader.Next.
func (s *OutputStream) Next() (Frame, error) { return s.fr.Next() }

// Offset is where to resume: just past the last whole log frame returned.
func (s *OutputStream) Offset() int64 { return s.fr.Offset() }

// Close ends the request.
func (s *OutputStream) Close() error { return s.body.Close() }

// ParseExit decodes the payload of an exit frame.
func ParseExit(payload []byte) (*Exit, error) {
	var e Exit
	if err := json.Unmarshal(payload, &e); err != nil {
		return nil, fmt.Errorf("shim: exit frame: %w", err)
	}
	return &e, nil
}

// Follow reads the process's output log from offset to its exit frame and calls fn with every log
// frame in order, the exit frame last (frames of unknown types included, so that fn may skip them;
// fn must not keep Payload). It returns the exit, or fn's error as is.
//
// Whenever the stream breaks (a transport error, a 5xx, or an end before the exit frame) Follow asks
// again from the offset just past the last whole frame it received, waiting with backoff, so fn sees
// every byte exactly once. Before resuming it checks the shim's boot id and returns ErrShimRestarted if
// the shim restarted, since a new process may then have the same id. It gives up on a 4xx answer (a
// deleted process is 404 process_not_found) and when ctx ends; through a proxy (NewViaProxy) the
// proxy's own refusals after the first answer are retried, as an apiserver restart causes them.
func (c *Client) Follow(ctx context.Context, id string, offset int64, fn func(Frame) error) (*Exit, error) {
	var boot string
	if err := c.retry(ctx, func() error {
		info, err := c.Info(ctx)
		if err == nil {
			boot = info.BootID
		}
		return err
	}); err != nil {
		return nil, err
	}
	var b backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := b.wait(ctx, c); err != nil {
				return nil, err
			}
			info, err := c.Info(ctx)
			if err != nil {
				if c.retryableServed(err) {
					continue
				}
				return nil, err
			}
			if info.BootID != boot {
				return nil, fmt.Errorf("%w while following %q", ErrShimRestarted, id)
			}
		}
		start := offset
		exit, err := c.followOnce(ctx, id, &offset, fn)
		var fe *fnError
		if errors.As(err, &fe) {
			return nil, fe.err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if exit != nil || err != nil && !c.retryableServed(err) {
			return exit, err
		}
		if offset > start {
			b.reset()
		}
	}
}

// retryableServed is retryable for a client that has been served already in this call: through a
// proxy it also takes the proxy's own refusals (401, 403 or 429 without the shim's error body) as
// transient, since an apiserver that has just restarted refuses until its authorizer has caught up.
// The shim itself never answers 403 or 429, and its 401 has a code.
func (c *Client) retryableServed(err error) bool {
	if retryable(err) {
		return true
	}
	var e *APIError
	return c.viaProxy && errors.As(err, &e) && e.Code == "" &&
		(e.Status == 401 || e.Status == 403 || e.Status == 429)
}

// errEndedEarly marks a follow stream that ended cleanly before the exit frame (a deleted process,
// or a shim ending its streams); the next attempt finds out which.
var errEndedEarly = errors.New("output stream ended before the exit frame")

// fnError carries an error of the caller's frame function out of followOnce, so it is never retried.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// followOnce runs one follow request, advancing *offset past each frame handed to fn. A connection
// that carries no byte (not even a keepalive) for FollowIdle is cancelled, to be resumed.
func (c *Client) followOnce(ctx context.Context, id string, offset *int64, fn func(Frame) error) (*Exit, error) {
	idle := c.FollowIdle
	if idle <= 0 {
		idle = 30 * time.Second
	}
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer watchdog.Stop()
	s, err := c.Output(reqCtx, id, *offset, true)
	if err != nil {
		return nil, idleOr(reqCtx, err)
	}
	defer s.Close()
	fr := NewFrameReader(&watchedReader{r: s.body, watchdog: watchdog, idle: idle}, *offset)
	for {
		f, err := fr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errEndedEarly
			}
			return nil, idleOr(reqCtx, err)
		}
		var exit *Exit
		if f.Type == FrameExit {
			if exit, err = ParseExit(f.Payload); err != nil {
				return nil, &FrameError{Offset: f.Offset, Reason: err.Error()}
			}
		}
		if err := fn(f); err != nil {
			return nil, &fnError{err}
		}
		*offset = fr.Offset()
		if exit != nil {
			return exit, nil
		}
	}
}

// errIdle marks a follow connection cancelled for carrying nothing for too long.
var errIdle = errors.New("output stream idle for too long")

// idleOr returns errIdle if the watchdog cancelled ctx (so that the caller retries rather than takes it
// for the end of its own context), else err.
func idleOr(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return errIdle
	}
	return err
}

// watchedReader re-arms the idle watchdog of a follow request on every read that brings bytes.
type watchedReader struct {
	r        io.Reader
	watchdog *time.Timer
	idle     time.Duration
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.watchdog.Reset(w.idle)
	}
	return n, err
}
