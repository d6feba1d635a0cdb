// Locality: the nodes a container prefers, most of what it reads first; nothing of another worker
// or of an unknown pod counts.

package atcruntime

import (
	"slices"
	"testing"

	"stepshim.dev/go/k8s"
)

func TestPreferredNodes(t *testing.T) {
	s := newStore(newLocalPods(t, "w1"), VolumeConfig{})
	other := newStore(newLocalPods(t, "w2"), VolumeConfig{})
	nodes := map[string]string{"get-a": "n1", "get-b": "n2", "img": "n2", s.holder: "n3"}
	nodeOf := func(pod string) string { return nodes[pod] }
	sizes := map[string]int64{"get-a": 8 << 20, "get-b": 1 << 20, "img": 1 << 20}
	size := func(pod, _ string) int64 { return sizes[pod] }
	spec := ContainerSpec{Inputs: []Input{
		{Artifact: s.podVolume("get-a", "/a")}, {Artifact: s.podVolume("get-b", "/b")},
		{Artifact: other.podVolume("get-a", "/c")}, {Artifact: s.podVolume("unknown", "/d")},
	}, Caches: []string{"cache"}}
	got, weights := preferredNodes(s, spec, &k8s.ImageFrom{Pod: "img", Path: "/i"}, nodeOf, size)
	// n1: 8 MiB, n2: 2 MiB (and the unknown pod's nothing), n3: one cache, 1 MiB.
	if want := []string{"n1", "n2", "n3"}; !slices.Equal(got, want) || !slices.Equal(weights, []int32{100, 25, 12}) {
		t.Fatalf("preferred %v with %v, want %v with [100 25 12]", got, weights, want)
	}
	if got, _ := preferredNodes(s, ContainerSpec{}, nil, nodeOf, size); len(got) != 0 {
		t.Fatalf("a container reading nothing prefers %v", got)
	}
	step := k8s.StepSpec{Name: "p", Image: "i", Delivery: k8s.FromConfigMap("c")}
	pod, err := k8s.StepPod(step, "w", k8s.PodAuth{TokenSHA256: "h"})
	if err != nil || pod.Spec.Affinity != nil {
		t.Fatalf("no preference: %v, %v", pod.Spec.Affinity, err)
	}
	step.PreferredNodes, step.PreferredWeights = []string{"n2", "n1"}, []int32{100, 7}
	pod, err = k8s.StepPod(step, "w", k8s.PodAuth{TokenSHA256: "h"})
	if err != nil {
		t.Fatal(err)
	}
	terms := pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 2 || terms[0].Weight != 100 || terms[1].Weight != 7 ||
		terms[0].Preference.MatchExpressions[0].Values[0] != "n2" ||
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Fatalf("preferred nodes as %+v", pod.Spec.Affinity)
	}
	// A build's containers prefer its other containers' node.
	spec2, err := stepSpec(&Config{Template: k8s.StepSpec{Delivery: k8s.FromConfigMap("c")}}, "p", ContainerSpec{Build: "42"}, "i", nil)
	if err != nil || spec2.Build != "42" || spec2.BuildAffinity != buildAffinity {
		t.Fatalf("a build's container: %+v, %v", spec2, err)
	}
	pod, err = k8s.StepPod(spec2, "w", k8s.PodAuth{TokenSHA256: "h"})
	if err != nil {
		t.Fatal(err)
	}
	pa := pod.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pa) != 1 || pa[0].Weight != buildAffinity || pa[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
		pa[0].PodAffinityTerm.LabelSelector.MatchLabels[k8s.BuildLabel] != "42" {
		t.Fatalf("build affinity as %+v", pod.Spec.Affinity)
	}
	off, _ := stepSpec(&Config{IgnoreLocality: true}, "p", ContainerSpec{Build: "42"}, "i", nil)
	if off.BuildAffinity != 0 {
		t.Fatal("IgnoreLocality kept the build affinity")
	}
}
