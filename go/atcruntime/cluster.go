// Cluster: the workers of one Kubernetes cluster that a process holds (an ATC web node holds every
// worker), so that a P2P URL made by one worker's volume is acted on by a volume of any other: the
// source's worker grants a read of its pod's directory, the destination's worker has its shim pull
// it, pod to pod across workers, namespaces and keys. Without a Cluster, a URL of another worker is
// refused with ErrP2PURL and ATC streams through the web node instead, as it does between workers of
// different runtimes (a Garden worker's baggageclaim URL is refused the same way, and a Garden
// worker refuses this package's stepshim-p2p:// URLs).

package atcruntime

import (
	"fmt"
	"sync"
	"time"
)

// Cluster is a set of Workers of one cluster whose step pods reach each other's shim port (the
// NetworkPolicy of each worker admits the others' pods: `stepctl manifests --peer-worker`).
// Give the same Cluster to the Config of each Worker; a Worker made again under a name replaces
// the one before. Safe for concurrent use.
type Cluster struct {
	mu      sync.RWMutex
	workers map[string]*volumeStore
}

// NewCluster returns an empty Cluster.
func NewCluster() *Cluster { return &Cluster{workers: map[string]*volumeStore{}} }

func (c *Cluster) add(s *volumeStore) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.workers[s.worker] = s
}

func (c *Cluster) get(worker string) (*volumeStore, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.workers[worker]
	return s, ok
}

// resolveURL is the store of the worker that made raw, s itself or a worker of s's cluster, with
// the URL's target once that worker's key has verified it at now.
func (s *volumeStore) resolveURL(raw string, now time.Time) (*volumeStore, p2pTarget, error) {
	p, err := parseURL(raw)
	if err != nil {
		return nil, p2pTarget{}, err
	}
	to := s
	if p.worker != s.worker {
		var ok bool
		if to, ok = s.cluster.get(p.worker); !ok {
			return nil, p2pTarget{}, fmt.Errorf("%w: made by worker %q, which is not in this worker's Cluster", ErrP2PURL, p.worker)
		}
	}
	t, err := to.signer.verify(raw, now)
	return to, t, err
}
