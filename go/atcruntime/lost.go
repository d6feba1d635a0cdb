// A node lost under a process: its kubelet, its containerd or its network gone, the pod still Running
// as far as the apiserver knows (the node controller marks it only after its grace period, and
// evicts after its pods' tolerations, five minutes by default). While a process is followed, its
// shim answers at least every 10 s (a keepalive of the output stream); once it has been silent for
// lostProbeAfter, the watcher asks it for /v1/info (lostProbeTimeout), and once it has answered
// nothing for Config.NodeLostAfter the process's Wait fails with a *PodGoneError of reason
// ReasonNodeLost naming the node, and the pod is deleted at once (no grace: nothing on a lost node
// can end gracefully; its kubelet kills what is left when it comes back).

package atcruntime

import (
	"context"
	"fmt"
	"time"

	"stepshim.dev/go/shim"
)

// ReasonNodeLost is the PodGoneError reason of a pod whose shim stopped answering.
const ReasonNodeLost = "NodeLost"

// When the watcher asks a silent shim, and how long it waits for the answer, at most: half of
// Config.NodeLostAfter when that is shorter.
const (
	lostProbeAfter   = 10 * time.Second
	lostProbeTimeout = 5 * time.Second
)

func (c *Config) nodeLostAfter() time.Duration {
	if c.NodeLostAfter <= 0 {
		return 20 * time.Second
	}
	return c.NodeLostAfter
}

// liveness judges whether a container's shim still answers.
type liveness struct {
	c *Container
	// probed is when the last probe was sent.
	probed time.Time
}

// check probes a shim silent for lostProbeAfter and returns the pod's end once it has been silent
// for Config.NodeLostAfter; nil while it answers, or when the container has no Contact.
func (l *liveness) check() *PodGoneError {
	ct := l.c.contact
	if ct == nil {
		return nil
	}
	after := l.c.cfg.nodeLostAfter()
	probeAfter, timeout := min(lostProbeAfter, after/2), min(lostProbeTimeout, after/2)
	silent := time.Since(ct.Last())
	if silent < probeAfter || time.Since(l.probed) < probeAfter/2 {
		return nil
	}
	l.probed = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	_, err := l.c.client.Info(ctx)
	cancel()
	silent = time.Since(ct.Last())
	if err == nil || silent < after {
		return nil
	}
	node := l.c.node
	if node == "" {
		node = "(unknown)"
	}
	return &PodGoneError{Pod: l.c.handle, Reason: ReasonNodeLost, Message: fmt.Sprintf(
		"no answer from its shim on node %s for %s (last: %v)", node, silent.Round(time.Second), err)}
}

// lostPod deletes the pod of a lost node at once, within Config.RequestTimeout.
func (c *Container) lostPod() {
	if c.deleteNow == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestTimeout())
	defer cancel()
	_ = c.deleteNow(ctx)
}

// withContact makes c's client mark ct (tests, and containers whose client the kit did not make).
func (c *Container) withContact(ct *shim.Contact) {
	c.client.TrackContact(ct)
	c.contact = ct
}
