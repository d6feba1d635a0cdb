// Where a re-attach starts. ATC's Attach has no offset: after a web node restarts, ATC's task step
// attaches to its process again and copies what it is given into the build log, so a replay from
// byte 0 writes every earlier line twice. The kit therefore keeps, in the pod's shim, how far each
// named process's output has been written to a caller's writers (a shim property, updated as output
// is delivered), and Attach continues from there: a new web node writes what the build log has not
// seen, and for a process that exited meanwhile only that and its status. Processes whose answer is
// their whole stdout (ATC's resource scripts) get their stdout replayed whole and their stderr, which
// goes to the build log, continued.

package atcruntime

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// PropertyDeliveredPrefix, followed by a process id, names the property holding the output log
// offset through which that process's output has been written to a caller's writers (PROTOCOL.md
// 5.3: a frame boundary).
const PropertyDeliveredPrefix = "stepshim.dev:delivered:"

// ResourceProcessID is the id ATC gives the processes of resource scripts (check, in, out), whose
// answer is their whole stdout: the default of Config.FullReplay.
const ResourceProcessID = "resource"

// Delivered is the output log offset through which process id's output has been written to a
// caller's writers, as recorded in the shim (0 when nothing is): where an Attach continues. Bounded
// by Config.RequestTimeout, like Properties.
func (c *Container) Delivered(id string) (int64, error) {
	props, err := c.allProperties()
	if err != nil {
		return 0, err
	}
	v, ok := props[PropertyDeliveredPrefix+id]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, nil // not the package's value: replay rather than skip
	}
	return n, nil
}

// fullReplay says whether an Attach to id replays its stdout from the first byte.
func (c *Container) fullReplay(id string) bool {
	if c.cfg.FullReplay == nil {
		return id == ResourceProcessID
	}
	return slices.Contains(c.cfg.FullReplay, id)
}

// recorder writes a process's delivered offset to its shim: the latest value, at most once per
// Config.DeliveredInterval, and the last one before the stream's end is reported (flush).
type recorder struct {
	c      *Container
	id     string
	latest atomic.Int64
	kick   chan struct{}
	end    chan struct{}
	done   chan struct{}
}

func (c *Container) newRecorder(id string, from int64) *recorder {
	r := &recorder{c: c, id: id, kick: make(chan struct{}, 1), end: make(chan struct{}), done: make(chan struct{})}
	r.latest.Store(from)
	go r.run(from)
	return r
}

// note records that the writers hold the output up to offset; an offset not past the latest (a
// full replay's stdout before what was delivered) changes nothing.
func (r *recorder) note(offset int64) {
	if offset <= r.latest.Load() {
		return
	}
	r.latest.Store(offset)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// flush writes the latest offset if it is not yet written and stops the recorder.
func (r *recorder) flush() {
	close(r.end)
	<-r.done
}

func (r *recorder) run(written int64) {
	defer close(r.done)
	interval := r.c.cfg.deliveredInterval()
	for {
		ending := false
		select {
		case <-r.kick:
		case <-r.end:
			ending = true
		}
		if v := r.latest.Load(); v != written && r.write(v) == nil {
			written = v
		}
		if ending {
			return
		}
		// The end cuts the pause short; the next turn then writes the last offset.
		select {
		case <-time.After(interval):
		case <-r.end:
		}
	}
}

// write sets the property, best effort: a failure leaves the previous value, which only makes a
// later Attach write some output again.
func (r *recorder) write(v int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.requestTimeout())
	defer cancel()
	ctx, stop := r.c.untilGone(ctx) // a pod that is gone ends the retries at once
	defer stop()
	return retry(ctx, func() error {
		return r.c.client.SetProperty(ctx, PropertyDeliveredPrefix+r.id, strconv.FormatInt(v, 10))
	})
}
