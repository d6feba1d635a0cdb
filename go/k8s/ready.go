// Waiting for a step pod to be ready. The pod's Ready condition comes from the kubelet's readiness
// probe, which runs once a second (its shortest period) and reaches this worker only after the
// kubelet has written the pod's status and the informer has delivered it: 1 to 2 s after the shim
// first answers. So once a pod has an IP, the wait also asks the shim's /healthz
// itself (TLS pinned to the pod's key when the pod serves TLS) every ProbeInterval, and the first
// answer makes the pod ready. The informer still ends the wait too: a pod that fails, or becomes
// Ready before the shim can be reached from here (a worker that only reaches shims through the
// apiserver), is seen as before.

package k8s

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ProbeInterval is how often a wait asks a running pod's shim whether it serves; each attempt is
// bounded by probeTimeout.
const ProbeInterval = 50 * time.Millisecond

const probeTimeout = 500 * time.Millisecond

// PodFailedError says a pod will never be ready, with Kubernetes' reason and message.
type PodFailedError struct {
	Pod, Reason, Message string
}

func (e *PodFailedError) Error() string {
	return fmt.Sprintf("pod %s cannot start: %s: %s", e.Pod, e.Reason, e.Message)
}

// NotReadyError says ctx ended before the pod was ready; Last is what it was waiting for. It unwraps
// to ctx's error.
type NotReadyError struct {
	Pod  string
	Last Progress
	Err  error
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("pod %s not ready: %v; last: %s", e.Pod, e.Err, e.Last)
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// WaitReady waits until pod name is ready and returns its IP: its Ready condition is true, or its
// shim answered this worker's probe. A pod that will never be ready is a *PodFailedError
// (ErrImagePull, a failed init container, OOMKilled, ...); ctx ending first is a *NotReadyError
// saying where the pod was (e.g. unschedulable, with the scheduler's message).
func (w *Worker) WaitReady(ctx context.Context, name string) (string, error) {
	return w.WaitProgress(ctx, name, nil)
}

// WaitProgress is WaitReady calling report (if not nil) at every change of the pod's progress.
func (w *Worker) WaitProgress(ctx context.Context, name string, report func(Progress)) (string, error) {
	last := Progress{Stage: Unknown}
	// The shim being asked, at probing. A new IP (the pod replaced by one of the same name) is
	// asked anew; the probe of the old one ends with the wait, its answer unread.
	var answered <-chan string
	probing := ""
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for {
		changed := w.changes()
		pod := w.Get(name)
		p := ProgressOf(pod)
		if p != last && report != nil {
			report(p)
		}
		last = p
		switch p.Stage {
		case Ready:
			return p.Detail, nil
		case Failed:
			return "", &PodFailedError{Pod: name, Reason: p.Reason, Message: p.Detail}
		}
		if probeable(pod) && pod.Status.PodIP != probing {
			probing = pod.Status.PodIP
			answered = w.probe(ctx, name, probing, PodTLS(pod))
		}
		select {
		case <-changed:
		case ip := <-answered:
			if now := w.Get(name); !probeable(now) || now.Status.PodIP != ip {
				answered = nil // the pod ended or moved meanwhile: its status decides
				continue
			}
			p = Progress{Stage: Ready, Detail: ip}
			if report != nil {
				report(p)
			}
			return ip, nil
		case <-ctx.Done():
			return "", &NotReadyError{Pod: name, Last: last, Err: ctx.Err()}
		}
	}
}

// probeable is whether pod has an IP and is not ending: its shim may answer. The kubelet writes the
// pod's status at the IP (init containers still running) and then with the Ready condition; that it
// runs is not seen in between, so the shim is asked from the first.
func probeable(pod *corev1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp == nil && pod.Status.PodIP != ""
}

// probe asks the shim of pod name at ip for /healthz every ProbeInterval until it answers (the
// channel then yields ip) or ctx ends.
func (w *Worker) probe(ctx context.Context, name, ip string, tls bool) <-chan string {
	answered := make(chan string, 1)
	c, err := w.ShimAt(name, ip, tls)
	if err != nil {
		return answered // never answers: the informer ends the wait
	}
	go func() {
		defer c.HTTP.CloseIdleConnections()
		tick := time.NewTicker(ProbeInterval)
		defer tick.Stop()
		for {
			attempt, cancel := context.WithTimeout(ctx, probeTimeout)
			err := c.Healthz(attempt)
			cancel()
			if err == nil {
				answered <- ip
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return answered
}
