// PodProcess: a process of a step pod's shim as ATC sees it. Its output streams to the caller's
// writers on a context of its own, from Run or Attach until the exit frame, whatever happens to the
// ctx that started it. Wait returns the result once the exit frame is in and every byte written;
// cancelling Wait's ctx stops the process (TERM, the grace period with output still flowing, KILL);
// the pod ending fails Wait at once with a *PodGoneError. Once Wait has its answer, a process with a
// generated id is deleted from the shim.

package atcruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"stepshim.dev/go/shim"
)

// PodProcess is a process started or attached to through a Container. It implements Process.
type PodProcess struct {
	id string
	c  *Container
	// generated says the id was made by Run: nobody can attach to it by name, so Wait deletes it.
	generated bool
	// offset is the output log offset just past the last frame written to the caller's writers.
	offset atomic.Int64
	// stopStreams ends the output and stdin streams; only Wait calls it, once it is done with them.
	stopStreams context.CancelFunc
	// done is closed when the output stream has ended: exit (and err) are then set.
	done chan struct{}
	// lost is set, and lostCh closed, when the pod's shim stopped answering (lost.go).
	lost   atomic.Pointer[PodGoneError]
	lostCh chan struct{}
	exit   *shim.Exit
	err    error

	waitOnce sync.Once
	result   ProcessResult
	waitErr  error
}

// startProcess begins streaming the output of sp from offset to pio's writers, and pio.Stdin to the
// process, on a context of their own (context.Background's child): they end with the log, or when
// Wait ends them. Stderr frames before skipStderr are not written (a full replay of stdout whose
// stderr the caller has). A process the caller named has what its writers hold recorded in the
// shim (delivered.go); one with a generated id, which nobody can attach to, has not.
func (c *Container) startProcess(sp *shim.ProcessStatus, offset, skipStderr int64, pio ProcessIO, generated bool) *PodProcess {
	streams, stop := context.WithCancel(context.Background())
	p := &PodProcess{
		id: sp.ID, c: c, generated: generated, stopStreams: stop,
		done: make(chan struct{}), lostCh: make(chan struct{}),
	}
	p.offset.Store(offset)
	if pio.Stdin != nil && !sp.StdinClosed && !sp.Exited() {
		go c.client.FeedStdin(streams, sp, pio.Stdin)
	}
	stdout, stderr := orDiscard(pio.Stdout), orDiscard(pio.Stderr)
	var rec *recorder
	if !generated {
		rec = c.newRecorder(sp.ID, max(offset, skipStderr))
	}
	go func() {
		defer close(p.done)
		exit, err := c.client.Follow(streams, sp.ID, offset, func(f shim.Frame) error {
			var err error
			switch {
			case f.Type == shim.FrameStdout:
				_, err = stdout.Write(f.Payload)
			case f.Type == shim.FrameStderr && f.Offset >= skipStderr:
				_, err = stderr.Write(f.Payload)
			case f.Type != shim.FrameStderr:
				return nil
			}
			if err == nil {
				end := f.Offset + 8 + int64(len(f.Payload))
				p.offset.Store(end)
				if rec != nil {
					rec.note(end)
				}
			}
			return err
		})
		p.exit, p.err = exit, err
		if rec != nil {
			rec.flush()
		}
	}()
	// A pod that ends, or whose shim stops answering (lost.go), ends the streams too, so that they
	// do not retry a gone shim until a Wait.
	go func() {
		live := &liveness{c: c}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			changed, gone := c.pod.watch()
			if gone == nil {
				if gone = live.check(); gone != nil {
					p.lost.Store(gone)
					close(p.lostCh)
				}
			}
			if gone != nil {
				stop()
				return
			}
			select {
			case <-p.done:
				return
			case <-changed:
			case <-tick.C:
			}
		}
	}()
	return p
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ID is the process's id on the shim.
func (p *PodProcess) ID() string { return p.id }

// Offset is the output log offset just past the last frame whose bytes have been written to the
// writers: keep it to resume with Container.AttachFrom after a restart, with no byte twice.
func (p *PodProcess) Offset() int64 { return p.offset.Load() }

// Wait returns the result once the process has exited and all its output has been written.
//
// Cancelling ctx stops the process: TERM to its process group, then Config.StopGrace (10 s by
// default) during which its output is still written, then KILL (the group, its session and their
// descendants), a wait of up to StopGrace for the exit, and the process is deleted from the shim;
// Wait then returns ctx's error. The pod ending (deleted, evicted, failed, node lost and evicted)
// fails Wait at once with a *PodGoneError. A process with a generated id is deleted from the shim
// once Wait has its result; one whose id the caller gave is kept, so that a later Attach or Status
// by that id still answers (see the package's documentation). Wait may be called more than once and
// concurrently: the first call's ctx governs, and every call returns its answer.
func (p *PodProcess) Wait(ctx context.Context) (ProcessResult, error) {
	p.waitOnce.Do(func() { p.result, p.waitErr = p.wait(ctx) })
	return p.result, p.waitErr
}

// wait is the first Wait.
func (p *PodProcess) wait(ctx context.Context) (ProcessResult, error) {
	if err := p.waitStream(ctx); err != nil {
		if lost := p.lost.Load(); lost != nil && err == error(lost) {
			p.stopStreams()
			p.c.lostPod()
			return ProcessResult{}, lost
		}
		if ctx.Err() != nil && !errors.As(err, new(*PodGoneError)) {
			return ProcessResult{}, p.stop(ctx.Err())
		}
		p.stopStreams()
		return ProcessResult{}, err
	}
	p.stopStreams()
	if p.err != nil {
		if lost := p.lost.Load(); lost != nil {
			p.c.lostPod()
			return ProcessResult{}, lost
		}
		if gone := p.c.pod.gone(); gone != nil {
			return ProcessResult{}, gone
		}
		return ProcessResult{}, fmt.Errorf("atcruntime: process %s of %s: %w", p.id, p.c.handle, p.err)
	}
	res := resultOf(p.exit)
	if gone := p.c.pod.gone(); gone != nil && res.Signal != "" {
		// Killed by the pod's end (the shim TERMs everything when the pod is deleted) rather than by
		// anything of its own: the pod's reason says more than the signal.
		return ProcessResult{}, gone
	}
	if p.generated {
		p.c.forget(p.id, false)
	}
	return res, nil
}

// waitStream waits for the end of the output stream (nil), the pod's end (*PodGoneError) or ctx's
// end (ctx's error).
func (p *PodProcess) waitStream(ctx context.Context) error {
	for {
		changed, gone := p.c.pod.watch()
		if gone != nil {
			select {
			case <-p.done:
				// The exit frame may have come in before the pod's end; wait tells them apart.
				return nil
			default:
				return gone
			}
		}
		select {
		case <-p.done:
			return nil
		case <-p.lostCh:
			select {
			case <-p.done:
				return nil
			default:
				return p.lost.Load()
			}
		case <-changed:
		case <-ctx.Done():
			select {
			case <-p.done:
				return nil
			default:
				return ctx.Err()
			}
		}
	}
}

// stop ends a process whose Wait's ctx ended: TERM, the grace period, KILL, a wait for the exit,
// then deleting it. It returns cause.
func (p *PodProcess) stop(cause error) error {
	defer p.stopStreams()
	grace := p.c.cfg.stopGrace()
	_ = p.c.call(func(ctx context.Context) error {
		_, err := p.c.client.Signal(ctx, p.id, "TERM")
		return err
	})
	if p.waitGrace(grace) {
		p.c.forget(p.id, true)
		return cause
	}
	_ = p.c.call(func(ctx context.Context) error {
		_, err := p.c.client.Signal(ctx, p.id, "KILL")
		return err
	})
	p.waitGrace(grace)
	// force: KILL also what the process left in its session and their descendants.
	p.c.forget(p.id, true)
	return cause
}

// waitGrace waits up to d for the output stream to end, and reports whether it did; the pod's end
// cuts it short.
func (p *PodProcess) waitGrace(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		changed, gone := p.c.pod.watch()
		if gone != nil {
			return false
		}
		select {
		case <-p.done:
			return true
		case <-changed:
		case <-t.C:
			return false
		}
	}
}

// SetTTY resizes the process's terminal, within Config.RequestTimeout; a process without one answers
// 409 no_tty, one that has exited 409 not_running.
func (p *PodProcess) SetTTY(tty TTYSpec) error {
	size := ttySize(&tty)
	return p.c.call(func(ctx context.Context) error {
		_, err := p.c.client.Resize(ctx, p.id, *size)
		return err
	})
}

// resultOf is the ProcessResult of a shim's exit.
func resultOf(e *shim.Exit) ProcessResult {
	r := ProcessResult{ExitStatus: e.Status, OOMKilled: oomKilled(e)}
	if e.Signal != nil {
		r.Signal = SignalName(*e.Signal)
	}
	return r
}

// oomKilled reads the shim's verdict: OOMKilled, or the reason of a shim that sends only that.
func oomKilled(e *shim.Exit) bool { return e.OOMKilled || e.Reason == "oom_kill" }

// linuxSignals names Linux's signal numbers: the shim runs on Linux whatever the caller runs on.
var linuxSignals = [...]string{1: "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS",
	"SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
	"SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ",
	"SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS"}

// SignalName is the name of Linux signal n ("SIGKILL"); real-time and unknown numbers are "SIG" and
// the number ("SIG34").
func SignalName(n int) string {
	if n > 0 && n < len(linuxSignals) {
		return linuxSignals[n]
	}
	return fmt.Sprintf("SIG%d", n)
}
