// Resource caches kept in place: no copy when marked, found while the pod lives, moved into the
// holder when container GC is about to delete the pod, missing (never an error) when the pod is lost
// first, and the worker's volume report without them; container GC holds back pods whose volumes
// could not be moved.

package atcruntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestResourceCacheInPlace(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, holderDir := testStore(t, lp)
	w := &Worker{vols: s}
	ctx := testCtx(t)
	files := sampleTree()
	lp.startPod("get-a")
	lp.startPod("get-b")
	dirA, dirB := t.TempDir(), t.TempDir()
	writeTree(t, dirA, files)
	writeTree(t, dirB, files)
	a, err := s.podVolume("get-a", dirA).InitializeResourceCache(ctx, "git:a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.podVolume("get-b", dirB).InitializeResourceCache(ctx, "git:b")
	if err != nil {
		t.Fatal(err)
	}
	// Marked, not copied: the holder has no contents for them, the caches are the pods' directories.
	if data, _ := os.ReadDir(filepath.Join(holderDir, "data")); len(data) != 0 {
		t.Fatalf("the holder holds copies: %v", data)
	}
	found, ok, err := w.LookupResourceCache(ctx, "git:a")
	if err != nil || !ok || found.Handle() != a.Handle() || found.(*HolderVolume).Pod() != "get-a" {
		t.Fatalf("in place lookup: %v %v %v", found, ok, err)
	}
	handles, err := w.VolumeHandles(ctx)
	if err != nil || !slices.Equal(handles, sortedOf(a.Handle(), b.Handle())) {
		t.Fatalf("reported %v, %v", handles, err)
	}
	// get-a goes by container GC (moved first); get-b is lost without a word.
	if stay := s.moveOut(ctx, []*corev1.Pod{lp.Get("get-a"), lp.Get("get-b")}, []string{"get-b"}, 0); len(stay) != 0 {
		t.Fatalf("pods that must stay: %v", stay)
	}
	_ = lp.Delete(ctx, "get-a")
	_ = lp.Delete(ctx, "get-b")
	found, ok, err = w.LookupResourceCache(ctx, "git:a")
	if err != nil || !ok || found.(*HolderVolume).Pod() != s.holder {
		t.Fatalf("moved lookup: %v %v %v", found, ok, err)
	}
	lp.startPod("task")
	in := t.TempDir()
	if err := s.streamInput(ctx, s.podVolume("task", in), found, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, in))
	if _, ok, err := w.LookupResourceCache(ctx, "git:b"); ok || err != nil {
		t.Fatalf("a lost in-place cache: found %v, %v; want missing", ok, err)
	}
	if handles, err = w.VolumeHandles(ctx); err != nil || !slices.Equal(handles, []string{a.Handle()}) {
		t.Fatalf("reported %v, %v; want only the moved cache", handles, err)
	}
	// The holder gone: every volume missing, reported as none.
	_ = lp.Delete(ctx, s.holder)
	if handles, err = w.VolumeHandles(ctx); err != nil || len(handles) != 0 {
		t.Fatalf("without the holder: %v, %v", handles, err)
	}
}

// TestContainerGCHoldsPodsWhoseVolumesCannotMove: a holder that exists but does not answer keeps
// every pod about to go (their volumes unknown); one whose move fails stays.
func TestContainerGCHoldsPodsWhoseVolumesCannotMove(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, _ := testStore(t, lp)
	ctx := testCtx(t)
	lp.startPod("get-a")
	dir := t.TempDir()
	writeTree(t, dir, sampleTree())
	if _, err := s.podVolume("get-a", dir).InitializeResourceCache(ctx, "git:a"); err != nil {
		t.Fatal(err)
	}
	lp.startPod("other")
	pods := []*corev1.Pod{lp.Get("get-a"), lp.Get("other")}
	// The move fails: the directory is gone from the pod (unreadable by the shim).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if stay := s.moveOut(ctx, pods, nil, 0); !slices.Equal(stay, []string{"get-a"}) {
		t.Fatalf("stay %v, want [get-a]", stay)
	}
	// The holder's shim stopped while its pod still shows: nothing may go.
	holder := lp.get(s.holder)
	holder.Stop()
	if stay := s.moveOut(ctx, pods, nil, 0); !slices.Equal(stay, []string{"get-a", "other"}) {
		t.Fatalf("with a holder that does not answer: stay %v, want both", stay)
	}
}

func sortedOf(h ...string) []string {
	slices.Sort(h)
	return h
}

// TestHolderLostWithItsNode: a holder that answers nothing (its shim stopped, as on a lost node)
// is lost after lostAfter of probes: deleted, its volumes missing (not found, none reported, a
// task cache restored empty), never an error; a holder that is merely slow once is not lost.
func TestHolderLostWithItsNode(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, _ := testStore(t, lp)
	s.lostAfter = 2 * time.Second
	w := &Worker{vols: s}
	ctx := testCtx(t)
	lp.startPod("get-a")
	dir := t.TempDir()
	writeTree(t, dir, sampleTree())
	if err := s.podVolume("get-a", dir).InitializeTaskCache(ctx, 1, "t", "c", 0); err != nil {
		t.Fatal(err)
	}
	if handles, err := w.VolumeHandles(ctx); err != nil || len(handles) != 1 {
		t.Fatalf("before: %v, %v", handles, err)
	}
	// A request that timed out once, the holder answering its probe: not lost.
	c, _, _ := s.holderShim(ctx)
	if s.holderLost(ctx, c, fmt.Errorf("slow: %w", context.DeadlineExceeded)) || lp.get(s.holder) == nil {
		t.Fatal("a holder that answers was taken for lost")
	}
	if err := lp.get(s.holder).Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, found, err := w.LookupVolume(ctx, w.TaskCacheHandle(1, "t", "c")); found || err != nil {
		t.Fatalf("a volume of the lost holder: found %v, %v; want missing", found, err)
	}
	took := time.Since(start)
	if lp.get(s.holder) != nil {
		t.Fatal("the lost holder was not deleted")
	}
	if handles, err := w.VolumeHandles(ctx); err != nil || len(handles) != 0 {
		t.Fatalf("after: %v, %v; want none", handles, err)
	}
	lp.startPod("task")
	in := t.TempDir()
	if err := s.restoreTaskCache(ctx, s.podVolume("task", in), TaskCacheKey{1, "t", "c"}, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(in); len(entries) != 0 {
		t.Fatalf("the cache of a lost holder restored %v", entries)
	}
	t.Logf("the holder was taken for lost %v after the first request", took.Round(100*time.Millisecond))
}
