// A holder lost with its node (its kubelet, containerd or network gone while the apiserver still
// shows it Running). A request to it that fails as a lost shim fails (no answer, a proxy's 5xx) is
// followed by probes, one a second, for Config.NodeLostAfter: a holder that answers none of them is
// lost, deleted at once (it is made again by the next volume operation that needs one), and its
// volumes are missing: LookupVolume and LookupResourceCache find nothing, VolumeHandles lists
// nothing, a task cache restores empty, GCVolumes has nothing to do. The next build runs cold,
// never failed.

package atcruntime

import (
	"context"
	"errors"
	"time"

	"stepshim.dev/go/shim"
)

// holderLost says whether err, from a request to the holder through c, means the holder is lost
// (see above); it deletes the holder if so.
func (s *volumeStore) holderLost(ctx context.Context, c *shim.Client, err error) bool {
	// A request of ours that timed out (metaCtx) got no answer either.
	if err == nil || ctx.Err() != nil || !transient(err) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	after := s.lostAfter
	deadline := time.Now().Add(after)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, min(lostProbeTimeout, after/4))
		_, perr := c.Info(pctx)
		cancel()
		if perr == nil || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(time.Second, after/8)):
		}
	}
	s.logf("atcruntime: the holder pod %s answered nothing for %s (%v): its volumes are missing; deleting it",
		s.holder, after, err)
	if d, ok := s.pods.(interface {
		DeleteNow(context.Context, string) error
	}); ok {
		if derr := d.DeleteNow(ctx, s.holder); derr != nil {
			s.logf("atcruntime: deleting the lost holder %s: %v", s.holder, derr)
		}
	}
	return true
}
