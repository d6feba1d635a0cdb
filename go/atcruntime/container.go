// Container: a step pod as ATC's runtime sees it. Run and Attach take a ctx that bounds only the
// start (the spawn, retried; the look-up of an existing process); the process and its output streams
// outlive it, on a context of their own (process.go). Attach replays the output from byte 0, as
// resource steps need; AttachFrom resumes at an offset the caller kept and Status answers just the
// state, as tasks need after a restart of their caller. Properties live in the pod's shim
// (/v1/properties), bounded in time by Config.RequestTimeout since ATC's signatures carry no ctx.

package atcruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"strings"
	"time"

	"stepshim.dev/go/shim"
)

// Properties the package keeps in a container's shim next to ATC's own.
const (
	// PropertyUser is the user processes run as when their ProcessSpec names none (ContainerSpec.User),
	// under the name Garden gives it.
	PropertyUser = "user"
	// PropertyDir is the working directory of processes whose ProcessSpec names none (ContainerSpec.Dir).
	PropertyDir = "stepshim.dev:dir"
	// PropertyReady is set once FindOrCreateContainer has put the inputs, caches and outputs in place;
	// a pod found without it is set up again.
	PropertyReady = "stepshim.dev:ready"
)

// Container runs processes in one step pod. Methods are safe for concurrent use.
type Container struct {
	handle string
	client *shim.Client
	pod    podWatch
	cfg    *Config
	// user and dir are the defaults of ProcessSpec.User and ProcessSpec.Dir.
	user, dir string
	// node is the pod's node; contact when its shim last answered (nil: not judged); deleteNow
	// deletes the pod without grace (lost.go).
	node      string
	contact   *shim.Contact
	deleteNow func(context.Context) error
}

// podWatch is what a Container knows of its pod's life (worker.go reads it from the worker's
// informer).
type podWatch interface {
	// watch returns a channel closed at the next change, and the pod's end, or nil while it lives.
	watch() (changed <-chan struct{}, gone *PodGoneError)
	// gone is the pod's end, or nil while it lives.
	gone() *PodGoneError
}

// PodGoneError says the container's pod has ended or is ending: deleted, evicted, failed, or
// replaced by another pod of the same name. Reason and Message are Kubernetes' where it gave them
// (Evicted, DeletionByTaintManager, OOMKilled, ...).
type PodGoneError struct {
	Pod, Reason, Message string
}

func (e *PodGoneError) Error() string {
	return fmt.Sprintf("pod %s is gone: %s: %s", e.Pod, e.Reason, e.Message)
}

// Handle is the container's handle: its step pod's name.
func (c *Container) Handle() string { return c.handle }

// Run starts a process and streams its output to pio's writers (and pio.Stdin, if not nil, to its
// stdin). ctx bounds only the start: the spawn is retried across transport errors and 5xx answers
// until the shim answers or ctx ends (safe, as a spawn repeated with the same id and spec finds the
// process the first one started); the process and its output streams live on after ctx ends. Stop
// the process by cancelling the ctx of Process.Wait. An empty spec.ID gets a generated one, deleted
// from the shim once Wait has the result. A missing executable is an *ExecutableNotFoundError; the
// pod's end is a *PodGoneError.
func (c *Container) Run(ctx context.Context, spec ProcessSpec, pio ProcessIO) (*PodProcess, error) {
	id, generated := spec.ID, false
	if id == "" {
		id, generated = newProcessID(), true
	}
	ctx, cancel := c.untilGone(ctx)
	defer cancel()
	sp, err := c.client.Run(ctx, id, c.shimSpec(spec, pio))
	if err != nil {
		if shim.IsExecutableNotFound(err) {
			return nil, &ExecutableNotFoundError{Path: spec.Path, Err: err}
		}
		return nil, c.goneOr(ctx, fmt.Errorf("atcruntime: run %s in %s: %w", spec.Path, c.handle, err))
	}
	return c.startProcess(sp, 0, 0, pio, generated), nil
}

// Attach connects pio to the existing process id, continuing its output where a caller's writers
// last had it (recorded in the shim as it is written, delivered.go): a web node that replaces one
// writes into the build log only what the log has not seen, and for a process that exited only that
// before its result. A process in Config.FullReplay (ATC's resource scripts by default, whose
// answer is their whole stdout) gets its stdout from the first byte and its stderr continued.
// pio.Stdin, taken to be the whole stdin from its first byte, is sent from where the shim's stdin
// stands. ctx bounds only the look-up. An id the shim does not know is an error for which
// shim.IsNotFound is true.
func (c *Container) Attach(ctx context.Context, id string, pio ProcessIO) (*PodProcess, error) {
	ctx, cancel := c.untilGone(ctx)
	defer cancel()
	sp, err := c.status(ctx, id)
	if err != nil {
		return nil, err
	}
	delivered, err := c.Delivered(id)
	if err != nil {
		return nil, c.goneOr(ctx, fmt.Errorf("atcruntime: attach to %s in %s: %w", id, c.handle, err))
	}
	delivered = min(delivered, sp.OutputEnd)
	if c.fullReplay(id) {
		return c.startProcess(sp, 0, delivered, pio, false), nil
	}
	return c.startProcess(sp, delivered, 0, pio, false), nil
}

// AttachFrom is Attach resuming the output at offset, a value of PodProcess.Offset the caller kept
// (a frame boundary of the output log, PROTOCOL.md 5.3): the writers get exactly the bytes after
// those already written, none twice. An offset that is not a frame boundary of the log is an error
// at once.
func (c *Container) AttachFrom(ctx context.Context, id string, offset int64, pio ProcessIO) (*PodProcess, error) {
	ctx, cancel := c.untilGone(ctx)
	defer cancel()
	sp, err := c.status(ctx, id)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > sp.OutputEnd {
		return nil, fmt.Errorf("atcruntime: attach to %s in %s at offset %d: the log ends at %d",
			id, c.handle, offset, sp.OutputEnd)
	}
	if offset > 0 && offset < sp.OutputEnd {
		// A request without follow checks that offset is a frame boundary (400 invalid_offset).
		err := retry(ctx, func() error {
			s, err := c.client.Output(ctx, id, offset, false)
			if err == nil {
				s.Close()
			}
			return err
		})
		if err != nil {
			return nil, c.goneOr(ctx, fmt.Errorf("atcruntime: attach to %s in %s at offset %d: %w", id, c.handle, offset, err))
		}
	}
	return c.startProcess(sp, offset, 0, pio, false), nil
}

// Status answers how process id stands without attaching to it: exited is false while it runs, else
// result is how it ended. An id the shim does not know is an error for which shim.IsNotFound is
// true.
func (c *Container) Status(ctx context.Context, id string) (result ProcessResult, exited bool, err error) {
	ctx, cancel := c.untilGone(ctx)
	defer cancel()
	sp, err := c.status(ctx, id)
	if err != nil || !sp.Exited() {
		return ProcessResult{}, false, err
	}
	return resultOf(sp.Exit), true, nil
}

// status is the shim's view of process id, retried across transport errors and 5xx answers.
func (c *Container) status(ctx context.Context, id string) (*shim.ProcessStatus, error) {
	var sp *shim.ProcessStatus
	err := retry(ctx, func() error {
		var err error
		sp, err = c.client.Status(ctx, id)
		return err
	})
	if err != nil {
		return nil, c.goneOr(ctx, fmt.Errorf("atcruntime: process %s in %s: %w", id, c.handle, err))
	}
	return sp, nil
}

// Properties returns the container's properties as ATC set them (PropertyUser, "user", is one of
// ATC's), kept in its shim's memory; this package's own, named "stepshim.dev:...", are left out.
// ATC's signature has no ctx: the request and its retries are bounded by Config.RequestTimeout (30 s
// by default).
func (c *Container) Properties() (map[string]string, error) {
	props, err := c.allProperties()
	maps.DeleteFunc(props, func(name, _ string) bool { return strings.HasPrefix(name, ownPropertyPrefix) })
	return props, err
}

// ownPropertyPrefix starts the names of this package's properties.
const ownPropertyPrefix = "stepshim.dev:"

// allProperties is every property of the container's shim, this package's included.
func (c *Container) allProperties() (map[string]string, error) {
	var props map[string]string
	err := c.call(func(ctx context.Context) error {
		var err error
		props, err = c.client.Properties(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("atcruntime: properties of %s: %w", c.handle, err)
	}
	return props, nil
}

// SetProperty sets a property of the container, bounded by Config.RequestTimeout like Properties.
// The shim bounds their count and sizes (PROTOCOL.md); beyond, the error is its 413 or 409.
func (c *Container) SetProperty(name, value string) error {
	err := c.call(func(ctx context.Context) error { return c.client.SetProperty(ctx, name, value) })
	if err != nil {
		return fmt.Errorf("atcruntime: property %q of %s: %w", name, c.handle, err)
	}
	return nil
}

// shimSpec is the spawn of spec, with the container's defaults of user and directory.
func (c *Container) shimSpec(spec ProcessSpec, pio ProcessIO) shim.Spec {
	s := shim.Spec{
		Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir, User: spec.User,
		Stdin: pio.Stdin != nil, TTY: ttySize(spec.TTY),
	}
	if s.Dir == "" {
		s.Dir = c.dir
	}
	if s.User == "" {
		s.User = c.user
	}
	return s
}

// ttySize is the terminal of a TTYSpec: nil for none, 80x24 for a zero size.
func ttySize(t *TTYSpec) *shim.TTYSize {
	if t == nil {
		return nil
	}
	if t.WindowSize.Columns == 0 || t.WindowSize.Rows == 0 {
		return &shim.TTYSize{Cols: 80, Rows: 24}
	}
	return &shim.TTYSize{Cols: int(t.WindowSize.Columns), Rows: int(t.WindowSize.Rows)}
}

func newProcessID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "atc-" + hex.EncodeToString(b[:])
}

// untilGone is ctx, also cancelled (with the *PodGoneError as cause) when the pod ends, so that a
// start retried against a pod that is gone fails instead of retrying until ctx ends. A pod already
// gone cancels it before any request.
func (c *Container) untilGone(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if gone := c.pod.gone(); gone != nil {
		cancel(gone)
		return ctx, func() {}
	}
	go func() {
		for {
			changed, gone := c.pod.watch()
			if gone != nil {
				cancel(gone)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// goneOr is the pod's end if it cut ctx short, else err.
func (c *Container) goneOr(ctx context.Context, err error) error {
	var gone *PodGoneError
	if errors.As(context.Cause(ctx), &gone) {
		return gone
	}
	return err
}

// call runs f bounded by Config.RequestTimeout, retrying transport errors and 5xx answers: the
// requests of methods whose signatures (ATC's) carry no ctx, and the clean-up of Wait.
func (c *Container) call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestTimeout())
	defer cancel()
	return retry(ctx, func() error { return f(ctx) })
}

// forget deletes process id from the shim (force: KILL what it left first), best effort: an error
// leaves it to the pod's end.
func (c *Container) forget(id string, force bool) {
	_ = c.call(func(ctx context.Context) error {
		err := c.client.Delete(ctx, id, force)
		if shim.IsNotFound(err) {
			return nil // a retry after a lost answer, or deleted by someone else
		}
		return err
	})
}

// retry calls f until it succeeds, fails for good or ctx ends, waiting 50 ms doubling to 2 s between
// attempts. Transport errors and 5xx answers are retried; the shim's deliberate answers (4xx), a
// TLS pin mismatch and the end of ctx are final.
func retry(ctx context.Context, f func() error) error {
	delay := 50 * time.Millisecond
	for {
		err := f()
		if err == nil || !transient(err) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// transient says whether err may pass on a retry: a 5xx answer, or a failure of the connection
// (a transport error, an answer cut or stalled). Everything else, the end of ctx included, is final.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, shim.ErrPinMismatch) {
		return false
	}
	var api *shim.APIError
	if errors.As(err, &api) {
		return api.Status >= 500
	}
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, shim.ErrAnswerStalled)
}
