// The holder against real shims: a task cache outlives its step pod and is restored into the next
// one, replaced whole, lost with its holder (an empty cache, no error) and kept again by a new
// holder; resource caches, artifact volumes, lookups by handle from another store, and GC.

package atcruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"stepshim.dev/go/shim"
)

func TestTaskCacheOutlivesItsPod(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, holderDir := testStore(t, lp)
	ctx := testCtx(t)
	key := TaskCacheKey{JobID: 7, StepName: "unit", Path: "go/pkg/mod"}

	// No holder yet: an empty cache, no holder made by a restore.
	lp.startPod("build-1")
	first := t.TempDir()
	if err := s.restoreTaskCache(ctx, s.podVolume("build-1", first), key, nil); err != nil {
		t.Fatal(err)
	}
	if lp.get(s.holder) != nil {
		t.Fatal("a restore created the holder")
	}
	files := sampleTree()
	writeTree(t, first, files)
	if err := s.podVolume("build-1", first).InitializeTaskCache(ctx, 7, "unit", "go/pkg/mod", 0); err != nil {
		t.Fatal(err)
	}
	w := &Worker{vols: s}
	if v, ok, err := w.LookupVolume(ctx, w.TaskCacheHandle(7, "unit", "go/pkg/mod")); !ok || err != nil || v.Source() != "w1" {
		t.Fatalf("the task cache by its handle: %v %v", ok, err)
	}
	_ = lp.Delete(ctx, "build-1")

	// The next build's pod gets it, through another web node (a store with no state of its own).
	lp.startPod("build-2")
	second := t.TempDir()
	other := newStore(lp, s.cfg)
	if err := other.restoreTaskCache(ctx, other.podVolume("build-2", second), key, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, second))

	// Kept again with other contents: replaced whole, the old generation removed.
	changed := map[string][]byte{"only.txt": []byte("new")}
	third := t.TempDir()
	writeTree(t, third, changed)
	if err := s.podVolume("build-2", third).InitializeTaskCache(ctx, 7, "unit", "go/pkg/mod", 0); err != nil {
		t.Fatal(err)
	}
	fourth := t.TempDir()
	if err := s.restoreTaskCache(ctx, s.podVolume("build-2", fourth), key, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, changed, readTree(t, fourth))
	gens, _ := os.ReadDir(filepath.Join(holderDir, "data", volumeName("task", key.String())))
	if len(gens) != 1 {
		t.Fatalf("%d generations kept, want 1", len(gens))
	}
	// Another key is another cache: an empty directory, made.
	fifth := filepath.Join(t.TempDir(), "cache")
	_ = s.restoreTaskCache(ctx, s.podVolume("build-2", fifth), TaskCacheKey{JobID: 7, StepName: "unit", Path: "other"}, nil)
	if entries, err := os.ReadDir(fifth); err != nil || len(entries) != 0 {
		t.Fatalf("another key restored %v (%v), want an empty directory", entries, err)
	}

	lostHolder(t, ctx, lp, s, third, key)
}

// lostHolder: with the holder gone a restore is an empty cache and no error; keeping the cache again
// (from dir of build-2) makes a new holder; a cancelled restore is the one error.
func lostHolder(t *testing.T, ctx context.Context, lp *localPods, s *volumeStore, dir string, key TaskCacheKey) {
	// The holder is lost: an empty cache and no error; keeping a cache makes a new holder.
	_ = lp.Delete(ctx, s.holder)
	sixth := t.TempDir()
	if err := s.restoreTaskCache(ctx, s.podVolume("build-2", sixth), key, nil); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, sixth); len(got) != 0 {
		t.Fatalf("restored %v from a lost holder", keys(got))
	}
	before := lp.created
	if err := s.podVolume("build-2", dir).InitializeTaskCache(ctx, 7, "unit", "go/pkg/mod", 0); err != nil {
		t.Fatal(err)
	}
	if lp.created != before+1 {
		t.Fatal("the holder was not made again")
	}
	// A cancelled restore is the one error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.restoreTaskCache(cctx, s.podVolume("build-2", t.TempDir()), key, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled restore: %v", err)
	}
}

// A cache kept from a step that ran as root is restored owned by the next step's user, so that a
// task that is not root can write into it (the shims run as root here, so they keep the tar's
// owners unless told otherwise).
func TestTaskCacheRestoredOwnedByTheStepUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another user needs root (CAP_CHOWN) for the shims")
	}
	lp := newLocalPods(t, "w1")
	s, _ := testStore(t, lp)
	ctx := testCtx(t)
	lp.startPod("build-1")
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"stamp": []byte("run 1"), "sub/deep/file": []byte("x")})
	if err := s.podVolume("build-1", dir).InitializeTaskCache(ctx, 1, "task", "cache", 0); err != nil {
		t.Fatal(err)
	}
	key := TaskCacheKey{JobID: 1, StepName: "task", Path: "cache"}
	want := shim.Owner{UID: 1000, GID: 1001}
	for _, owner := range []*shim.Owner{&want, nil} {
		out := t.TempDir()
		if err := s.restoreTaskCache(ctx, s.podVolume("build-1", out), key, owner); err != nil {
			t.Fatal(err)
		}
		wantOwner := shim.Owner{}
		if owner != nil {
			wantOwner = *owner
		}
		for _, rel := range []string{"stamp", "sub", "sub/deep", "sub/deep/file"} {
			fi, err := os.Lstat(filepath.Join(out, rel))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if got := (shim.Owner{UID: st.Uid, GID: st.Gid}); got != wantOwner {
				t.Errorf("restored with owner %v: %s is owned by %v, want %v", owner, rel, got, wantOwner)
			}
		}
	}
}

func TestTaskCacheExpiresAndNoHolder(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, _ := testStore(t, lp)
	ctx := testCtx(t)
	lp.startPod("build-1")
	dir := t.TempDir()
	writeTree(t, dir, sampleTree())
	if err := s.podVolume("build-1", dir).InitializeTaskCache(ctx, 1, "s", "c", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	out := t.TempDir()
	if err := s.restoreTaskCache(ctx, s.podVolume("build-1", out), TaskCacheKey{1, "s", "c"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, out); len(got) != 0 {
		t.Fatalf("an expired cache restored %v", keys(got))
	}
	none := newStore(lp, VolumeConfig{HolderName: "nothing"})
	if err := none.restoreTaskCache(ctx, none.podVolume("build-1", out), TaskCacheKey{1, "s", "c"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := none.podVolume("build-1", dir).InitializeTaskCache(ctx, 1, "s", "c", 0); !errors.Is(err, ErrNoHolder) {
		t.Fatalf("no holder configured: %v", err)
	}
}

func TestResourceCacheArtifactsLookupAndGC(t *testing.T) {
	lp := newLocalPods(t, "w1")
	s, _ := testStore(t, lp)
	w := &Worker{vols: s}
	ctx := testCtx(t)
	if h := w.TaskCacheHandle(1, "s", "c"); h != "holder/w1-volumes/"+volumeName("task", "1/s/c") {
		t.Fatalf("task cache handle %s", h)
	}
	lp.startPod("get-1")
	dir := t.TempDir()
	files := sampleTree()
	writeTree(t, dir, files)
	rc, err := s.podVolume("get-1", dir).InitializeResourceCache(ctx, "git:v1")
	if err != nil {
		t.Fatal(err)
	}
	// Container GC moves it into the holder before the get's pod goes (inplace.go).
	if stay := s.moveOut(ctx, []*corev1.Pod{lp.Get("get-1")}, nil, 0); len(stay) != 0 {
		t.Fatalf("pods that must stay: %v", stay)
	}
	_ = lp.Delete(ctx, "get-1")
	found, ok, err := w.LookupResourceCache(ctx, "git:v1")
	if err != nil || !ok || found.Handle() != rc.Handle() || found.Source() != "w1" {
		t.Fatalf("lookup of the resource cache: %v %v %v", found, ok, err)
	}
	// A later step gets it pod to pod.
	lp.startPod("task-1")
	in := t.TempDir()
	if err := s.streamInput(ctx, s.podVolume("task-1", in), found, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, in))

	// An artifact volume for `fly execute -i`: empty, filled by StreamIn, found by its handle.
	art, err := w.CreateVolumeForArtifact(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeTree(t, src, map[string][]byte{"input.txt": []byte("uploaded")})
	up, err := s.podVolume("task-1", src).StreamOut(ctx, ".", Gzip)
	if err != nil {
		t.Fatal(err)
	}
	if err := art.StreamIn(ctx, ".", Gzip, 1, up); err != nil {
		t.Fatal(err)
	}
	_ = up.Close()
	again, ok, err := w.LookupVolume(ctx, art.Handle())
	if err != nil || !ok {
		t.Fatalf("lookup of %s: %v %v", art.Handle(), ok, err)
	}
	in2 := t.TempDir()
	if err := s.streamInput(ctx, s.podVolume("task-1", in2), again, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, map[string][]byte{"input.txt": []byte("uploaded")}, readTree(t, in2))
	if v, ok, err := w.LookupVolume(ctx, "pod/task-1"+in2); err != nil || !ok || v.Handle() != "pod/task-1"+in2 {
		t.Fatalf("lookup of a pod volume: %v %v %v", v, ok, err)
	}
	for _, h := range []string{"pod/gone-pod/x", "holder/" + s.holder + "/artifact-none", "holder/other/x", "nonsense"} {
		if _, ok, err := w.LookupVolume(ctx, h); ok || err != nil {
			t.Fatalf("lookup of %s: %v %v", h, ok, err)
		}
	}

	// GC by desired set: the artifact stays, the resource cache goes.
	removed, err := w.GCVolumes(ctx, []string{art.Handle(), "pod/task-1/x"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{rc.Handle()}) {
		t.Fatalf("GC removed %v, want %v", removed, rc.Handle())
	}
	if _, ok, _ := w.LookupResourceCache(ctx, "git:v1"); ok {
		t.Fatal("the collected resource cache is still found")
	}
	if _, ok, _ := w.LookupVolume(ctx, art.Handle()); !ok {
		t.Fatal("the desired artifact volume was collected")
	}
}

func TestTaskCacheKeysAreCleanPaths(t *testing.T) {
	want := TaskCacheKey{1, "unit", "go/pkg"}.String()
	for _, p := range []string{"go/pkg/", "./go/pkg", "go//pkg", "go/x/../pkg"} {
		if got := (TaskCacheKey{1, "unit", p}).String(); got != want {
			t.Errorf("%q: key %q, want %q as Garden cleans it", p, got, want)
		}
	}
}
