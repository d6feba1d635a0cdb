// Contact: when a pod's shim last answered any client this Worker made for it (at its pod IP or
// through the apiserver's proxy), so that a caller can tell a shim that is slow from one that is
// lost with its node or its network. One shim.Contact per pod UID, from the first client on,
// forgotten when the informer sees the pod deleted.

package k8s

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"stepshim.dev/go/shim"
)

// Contact is when the shim of pod name last answered a client of this Worker; nil before any client
// was made for the pod in the cache, or when it is not in the cache.
func (w *Worker) Contact(name string) *shim.Contact {
	pod := w.Get(name)
	if pod == nil {
		return nil
	}
	if ct, ok := w.contacts.Load(pod.UID); ok {
		return ct.(*shim.Contact)
	}
	return nil
}

// trackContact makes c mark the Contact of pod name (made now if the pod has none yet).
func (w *Worker) trackContact(name string, c *shim.Client) {
	pod := w.Get(name)
	if pod == nil {
		return
	}
	ct, _ := w.contacts.LoadOrStore(pod.UID, shim.NewContact())
	c.TrackContact(ct.(*shim.Contact))
}

// forgetContact drops the Contact of a pod the informer saw deleted, and keeps its last state.
func (w *Worker) forgetContact(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		w.contacts.Delete(pod.UID)
		w.departed.add(pod)
	}
}

// departedKeep is how many deleted pods' last states a Worker keeps (Departed).
const departedKeep = 1024

// departed remembers the last state of the pods the informer saw deleted, the newest
// departedKeep of them.
type departed struct {
	mu    sync.Mutex
	pods  map[string]*corev1.Pod
	order []string
}

func (d *departed) add(pod *corev1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pods == nil {
		d.pods = map[string]*corev1.Pod{}
	}
	if _, ok := d.pods[pod.Name]; !ok {
		d.order = append(d.order, pod.Name)
	}
	d.pods[pod.Name] = pod
	for len(d.order) > departedKeep {
		delete(d.pods, d.order[0])
		d.order = d.order[1:]
	}
}

func (d *departed) get(name string) *corev1.Pod {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pods[name]
}

// Departed is the last state the informer saw of pod name before it was deleted (its eviction's
// DisruptionTarget condition, say), or nil: a waiter that wakes after the deletion still learns
// why. The newest 1024 deleted pods are kept.
func (w *Worker) Departed(name string) *corev1.Pod {
	if p := w.departed.get(name); p != nil && w.Get(name) == nil {
		return p
	}
	return nil
}
