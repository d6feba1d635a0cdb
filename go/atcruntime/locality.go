// Locality: a container prefers the nodes where what it reads already is, so that fewer bytes cross
// nodes. Each input that is a directory of a pod of this worker (a step pod, or the holder for a
// resource cache or an upload), the pod its image is pulled from, and the holder when the container
// has task caches to restore, count for their pod's node; the nodes are preferred most counted
// first (k8s.StepSpec.PreferredNodes, a preference the scheduler weighs with the rest, never a
// requirement that could leave a container pending).

package atcruntime

import (
	"sort"

	"stepshim.dev/go/k8s"
)

// nearData is the nodes to prefer for spec, whose image comes from from (nil: a reference).
func (w *Worker) nearData(spec ContainerSpec, from *k8s.ImageFrom) []string {
	return preferredNodes(w.vols, spec, from, func(pod string) string {
		if p := w.kit.Get(pod); p != nil {
			return p.Spec.NodeName
		}
		return ""
	})
}

// preferredNodes is nearData with nodeOf naming a pod's node ("" when unknown).
func preferredNodes(vols *volumeStore, spec ContainerSpec, from *k8s.ImageFrom, nodeOf func(pod string) string) []string {
	count := map[string]int{}
	add := func(pod string) {
		if n := nodeOf(pod); n != "" {
			count[n]++
		}
	}
	for _, in := range spec.Inputs {
		if v, ok := vols.localVolume(in.Artifact); ok {
			add(v.Pod())
		}
	}
	if from != nil {
		add(from.Pod)
	}
	if len(spec.Caches) > 0 {
		add(vols.holder)
	}
	nodes := make([]string, 0, len(count))
	for n := range count {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if count[nodes[i]] != count[nodes[j]] {
			return count[nodes[i]] > count[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	return nodes
}
