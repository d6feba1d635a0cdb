// Locality: a container prefers the nodes where what it reads already is, so that fewer bytes cross
// nodes. Each input that is a directory of a pod of this worker (a step pod, or the holder for a
// resource cache or an upload) and the pod its image is pulled from count for their pod's node by
// their size (the source shim's stream length, one request each), the holder by 1 MiB per task
// cache; the node read the most from is preferred with weight 100, the others with their share of
// it (k8s.StepSpec.PreferredNodes and PreferredWeights: a preference the scheduler weighs with the
// rest, never a requirement that could leave a container pending). A container of a named build
// (ContainerSpec.Build) also prefers the node its build's other containers run on (weight 50), so
// that independent steps of one build (its gets) gather and the steps reading them find them there.

package atcruntime

import (
	"context"
	"sort"

	"stepshim.dev/go/k8s"
)

// nearData is the nodes to prefer for spec, whose image comes from from (nil: a reference), with
// their weights.
func (w *Worker) nearData(ctx context.Context, spec ContainerSpec, from *k8s.ImageFrom) ([]string, []int32) {
	nodeOf := func(pod string) string {
		if p := w.kit.Get(pod); p != nil {
			return p.Spec.NodeName
		}
		return ""
	}
	return preferredNodes(w.vols, spec, from, nodeOf, func(pod, dir string) int64 {
		c, err := w.kit.Connect(ctx, pod)
		if err != nil {
			return 0
		}
		n, _, err := c.FilesLength(ctx, contents(dir))
		if err != nil {
			return 0
		}
		return n
	})
}

// buildAffinity is the weight of a container's preference for the node its build's other
// containers run on (k8s.StepSpec.BuildAffinity): below the bytes of its own inputs (up to 100).
const buildAffinity = 50

// cacheWeight is what a container's task caches count for, their size unknown before they are
// restored.
const cacheWeight = 1 << 20

// preferredNodes is nearData with nodeOf naming a pod's node ("" when unknown) and size the bytes
// of a directory of a pod (0 when unknown: it counts as one byte). Each node weighs the bytes read
// from it; the heaviest gets 100, the others their share of it (at least 1).
func preferredNodes(vols *volumeStore, spec ContainerSpec, from *k8s.ImageFrom,
	nodeOf func(pod string) string, size func(pod, dir string) int64) ([]string, []int32) {
	bytes := map[string]int64{}
	add := func(pod, dir string, n int64) {
		if node := nodeOf(pod); node != "" {
			bytes[node] += max(n, 1)
		}
	}
	for _, in := range spec.Inputs {
		if v, ok := vols.localVolume(in.Artifact); ok {
			add(v.Pod(), v.Path(), size(v.Pod(), v.Path()))
		}
	}
	if from != nil {
		add(from.Pod, from.Path, size(from.Pod, from.Path))
	}
	if len(spec.Caches) > 0 {
		add(vols.holder, "", int64(len(spec.Caches))*cacheWeight)
	}
	nodes := make([]string, 0, len(bytes))
	for n := range bytes {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if bytes[nodes[i]] != bytes[nodes[j]] {
			return bytes[nodes[i]] > bytes[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	weights := make([]int32, len(nodes))
	for i, n := range nodes {
		weights[i] = int32(max(1, bytes[n]*100/bytes[nodes[0]]))
	}
	return nodes, weights
}
