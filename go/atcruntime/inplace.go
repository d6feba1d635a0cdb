// Resource caches kept in place: a get step's output becomes its resource cache where it is, in the
// get's step pod, as Garden marks the volume instead of copying it; the holder keeps only its meta
// file naming the pod and directory. The copy into the holder is paid off the build's path, when
// container GC is about to delete the pod (a pod whose move fails stays until the next GC). A pod
// that is lost first (deleted by hand, evicted, its node gone) takes the cache with it: the cache is
// missing, LookupResourceCache finds nothing and the next get runs, never a failed build.

package atcruntime

import (
	"context"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"stepshim.dev/go/k8s"
)

// markInPlace records v as volume name of the holder without copying it.
func (s *volumeStore) markInPlace(ctx context.Context, v *PodVolume, name string, m holderMeta) (*HolderVolume, error) {
	c, old, hadOld, err := s.openMeta(ctx, name)
	if err != nil {
		return nil, err
	}
	m.Gen, m.Pod, m.Path, m.Updated = "", v.pod, v.path, time.Now().UTC()
	if err := s.writeMeta(ctx, c, name, m); err != nil {
		return nil, err
	}
	if hadOld && old.Gen != "" {
		_ = c.RemoveFiles(ctx, s.data+"/"+name+"/"+old.Gen)
	}
	return s.holderVolume(name, m), nil
}

// moveOut copies into the holder the in-place volumes of the pods that container GC is about to
// delete (not in keep, at least grace old) and returns the pods whose volumes could not be moved,
// which must stay for now.
func (s *volumeStore) moveOut(ctx context.Context, pods []*corev1.Pod, keep []string, grace time.Duration) []string {
	want := map[string]bool{}
	for _, p := range keep {
		want[p] = true
	}
	leaving := map[string]bool{}
	for _, p := range k8s.SelectGarbage(pods, want, grace, time.Now()) {
		leaving[p] = true
	}
	if len(leaving) == 0 {
		return nil
	}
	c, ok, err := s.holderShim(ctx)
	if !ok {
		if err != nil {
			// The holder does not answer: which pods hold volumes is unknown, so none goes.
			s.logf("atcruntime: container GC waits: the holder does not answer: %v", err)
			return sortedKeys(leaving)
		}
		return nil
	}
	all, err := s.listMeta(ctx, c)
	if err != nil {
		s.logf("atcruntime: container GC waits: listing the holder's volumes: %v", err)
		return sortedKeys(leaving)
	}
	stay := map[string]bool{}
	for name, m := range all {
		if m.Pod == "" || !leaving[m.Pod] {
			continue
		}
		moved := m
		moved.Pod, moved.Path = "", ""
		if _, err := s.keep(ctx, s.podVolume(m.Pod, m.Path), name, moved); err != nil {
			s.logf("atcruntime: moving the %s volume %q out of pod %s before it goes: %v", m.Kind, m.Key, m.Pod, err)
			stay[m.Pod] = true
		}
	}
	return sortedKeys(stay)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// VolumeHandles is the handles of the volumes the worker keeps apart from its containers (task and
// resource caches, artifact volumes), for ATC to mark the others of its database missing, as a
// Garden worker reports its volumes. A holder pod that is gone keeps nothing: an empty list, its
// volumes missing (with VolumeConfig.HolderClaim, it is made again and its volumes listed). A holder
// lost with its node (holderlost.go) is deleted and lists nothing. A holder that exists but does not answer is an error, never an empty list.
// A resource cache kept in place whose pod is gone is not listed. Step pods' own directories go
// with their containers.
func (w *Worker) VolumeHandles(ctx context.Context) ([]string, error) {
	return w.vols.handles(ctx)
}

func (s *volumeStore) handles(ctx context.Context) ([]string, error) {
	_, all, err := s.holderMetas(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, m := range all {
		if m.Expires != nil && time.Now().After(*m.Expires) {
			continue
		}
		if m.Pod != "" {
			if pod := s.pods.Get(m.Pod); pod == nil || pod.DeletionTimestamp != nil {
				continue
			}
		}
		out = append(out, holderHandlePrefix+s.holder+"/"+name)
	}
	sort.Strings(out)
	return out, nil
}
