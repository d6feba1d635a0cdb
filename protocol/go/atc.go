// The adapter shaped like Concourse ATC's runtime: a Container whose Run, Attach and AttachOrRun take
// a ProcessSpec and a ProcessIO of plain readers and writers, and a Process whose Wait answers the exit
// status once the exit frame has arrived and all output has been written.

package shim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
)

// WindowSize is a terminal size in character cells.
type WindowSize struct {
	Columns uint16
	Rows    uint16
}

// TTYSpec asks for a pseudo-terminal. A nil WindowSize means 80x24.
type TTYSpec struct {
	WindowSize *WindowSize
}

// ProcessSpec describes a process to run. An empty ID gets a random one.
type ProcessSpec struct {
	ID   string
	Path string
	Args []string
	Env  []string
	Dir  string
	User string
	TTY  *TTYSpec
}

// ProcessIO connects a process to the caller. Stdout and Stderr receive the process's output in the
// order the shim logged it (with a tty everything goes to Stdout); nil discards. If Stdin is non-nil
// the process gets a stdin pipe fed from it, and EOF when it ends.
type ProcessIO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Container runs processes on one shim.
type Container struct {
	Client *Client
}

// NewContainer returns a Container using c.
func NewContainer(c *Client) *Container { return &Container{Client: c} }

// Process is a process started or attached to through a Container.
type Process struct {
	id     string
	client *Client
	ctx    context.Context
	done   chan struct{}
	status int
	err    error
}

func windowSize(t *TTYSpec) *TTYSize {
	if t == nil {
		return nil
	}
	if t.WindowSize == nil {
		return &TTYSize{Cols: 80, Rows: 24}
	}
	return &TTYSize{Cols: int(t.WindowSize.Columns), Rows: int(t.WindowSize.Rows)}
}

// Run starts a process and streams its output to pio's writers (and pio.Stdin to it). The spawn is
// retried across transport errors (it is idempotent), so an equal process already running under
// spec.ID is attached to rather than started twice. A missing executable is an error matching
// ErrExecutableNotFound; an id in use with a different spec is 409 spec_conflict.
//
// ctx governs the streams: once it ends they stop and Wait answers ctx's error, but the process itself
// runs on; a later Attach picks it up again.
func (c *Container) Run(ctx context.Context, spec ProcessSpec, pio ProcessIO) (*Process, error) {
	if spec.ID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		spec.ID = "p-" + hex.EncodeToString(b[:])
	}
	p, err := c.Client.Run(ctx, spec.ID, Spec{
		Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir, User: spec.User,
		Stdin: pio.Stdin != nil, TTY: windowSize(spec.TTY),
	})
	if err != nil {
		return nil, err
	}
	return c.start(ctx, p, pio)
}

// Attach connects pio to the existing process id: all its output from the first byte goes to the
// writers, and pio.Stdin, taken to be the process's whole stdin from its first byte, is sent from
// where the shim's stdin stands (the bytes already accepted are read and dropped). An unknown id is an
// error for which IsNotFound is true. ctx governs the streams as for Run.
func (c *Container) Attach(ctx context.Context, id string, pio ProcessIO) (*Process, error) {
	sp, err := c.status(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.start(ctx, sp, pio)
}

// AttachOrRun attaches to spec.ID if the shim has it, else runs spec: how a task survives a restart
// of its caller.
func (c *Container) AttachOrRun(ctx context.Context, spec ProcessSpec, pio ProcessIO) (*Process, error) {
	p, err := c.Attach(ctx, spec.ID, pio)
	if !IsNotFound(err) {
		return p, err
	}
	p, err = c.Run(ctx, spec, pio)
	if HasCode(err, CodeSpecConflict) {
		// Someone else ran a process under this id since the Attach.
		return c.Attach(ctx, spec.ID, pio)
	}
	return p, err
}

func (c *Container) status(ctx context.Context, id string) (*ProcessStatus, error) {
	var p *ProcessStatus
	err := c.Client.retry(ctx, func() error {
		var err error
		p, err = c.Client.Status(ctx, id)
		return err
	})
	return p, err
}

// start begins streaming the output of p to pio's writers and pio.Stdin to p.
func (c *Container) start(ctx context.Context, sp *ProcessStatus, pio ProcessIO) (*Process, error) {
	proc := &Process{id: sp.ID, client: c.Client, ctx: ctx, done: make(chan struct{})}
	streams, stop := context.WithCancel(ctx)
	if pio.Stdin != nil && !sp.StdinClosed {
		go c.Client.FeedStdin(streams, sp, pio.Stdin)
	}
	stdout, stderr := orDiscard(pio.Stdout), orDiscard(pio.Stderr)
	go func() {
		defer close(proc.done)
		defer stop()
		exit, err := c.Client.Follow(streams, sp.ID, 0, func(f Frame) error {
			var err error
			switch f.Type {
			case FrameStdout:
				_, err = stdout.Write(f.Payload)
			case FrameStderr:
				_, err = stderr.Write(f.Payload)
			}
			return err
		})
		if err != nil {
			proc.err = err
			return
		}
		proc.status = exit.Status
	}()
	return proc, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ID is the process's id on the shim.
func (p *Process) ID() string { return p.id }

// Wait returns the exit status (the exit code, or 128 + the signal number) once the exit frame has
// arrived and all output has been written to the writers, or an error if following the output failed
// (a deleted process is IsNotFound; a restarted shim is ErrShimRestarted) or ctx ended first.
func (p *Process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.status, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// SetTTY resizes the process's terminal; a process without one answers 409 no_tty.
func (p *Process) SetTTY(tty TTYSpec) error {
	_, err := p.client.Resize(p.ctx, p.id, *windowSize(&tty))
	return err
}
