// Contact: when a pod's shim last answered any client this Worker made for it (at its pod IP or
// through the apiserver's proxy), so that a caller can tell a shim that is slow from one that is
// lost with its node or its network. One shim.Contact per pod UID, from the first client on,
// forgotten when the informer sees the pod deleted.

package k8s

import (
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

// forgetContact drops the Contact of a pod the informer saw deleted.
func (w *Worker) forgetContact(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		w.contacts.Delete(pod.UID)
	}
}
