// Retries: the loop that repeats a request across transport errors and 5xx answers, and its
// backoff with jitter.

package shim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// retry calls f until it succeeds, fails for good (see retryable) or ctx ends, waiting with
// exponential backoff and jitter between attempts.
func (c *Client) retry(ctx context.Context, f func() error) error {
	var b backoff
	for {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		if werr := b.wait(ctx, c); werr != nil {
			return fmt.Errorf("%w (last error: %v)", werr, err)
		}
	}
}

// backoff is the wait between attempts of a retry loop: it doubles from MinBackoff to MaxBackoff, with
// up to 50% jitter so that many clients of a restarted shim do not come back in step.
type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

func (b *backoff) wait(ctx context.Context, c *Client) error {
	lo, hi := c.MinBackoff, c.MaxBackoff
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 2 * time.Second
	}
	if b.next < lo {
		b.next = lo
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, hi)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
