//go:build cluster

// Volumes that outlive their step pods, on a real cluster, as a worker holding only the RBAC
// `stepctl manifests` prints: a task cache kept from one build's pod into the holder (made by the kit
// from the shim image, running no process) and restored into the next build's pod after the first is
// gone, timed against a cold fill; the holder deleted (an empty cache, no failure, a new holder made
// when a cache is kept again); GC by desired set; then what streaming costs on the pod network, raw
// against zstd, s2 and gzip through the caller, and the pod-to-pod pull. tests/cluster/tests.d/
// 87-atc-volumes builds and runs it. Each check prints one "87-atc-volumes: ok:" line.

package atcruntime

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"stepshim.dev/go/k8s"
)

func ok(format string, args ...any) { fmt.Printf("87-atc-volumes: ok: "+format+"\n", args...) }

func TestVolumesCluster(t *testing.T) {
	e := readClusterEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 420*time.Second)
	defer cancel()
	kit := connectKit(t, ctx, e)
	delivery, err := k8s.InitContainer(e.shimImage).WithTLS(k8s.TLSMode(os.Getenv("STEPSHIM_KIT_TLS")))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(kit, VolumeConfig{
		Holder:     k8s.StepSpec{Image: e.shimImage, Delivery: delivery},
		HolderName: "vols-holder",
		Logf:       t.Logf,
	})
	step := func(name string) *PodVolume {
		t.Helper()
		if _, err := kit.Create(ctx, k8s.StepSpec{Name: name, Image: e.stepImage, Build: "vols", Step: name, Delivery: delivery}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if _, err := kit.WaitReady(ctx, name); err != nil {
			t.Fatal(err)
		}
		return s.podVolume(name, "/tmp/cache")
	}
	key := TaskCacheKey{JobID: 42, StepName: "unit", Path: "cache"}

	// A cold build: its cache arrives from outside the cluster (uploaded, as a download would).
	first := step("vols-build-1")
	tarBytes, files := tarOfTree(t, e.tree)
	start := time.Now()
	if err := first.StreamIn(ctx, ".", Raw, 0, bytesReader(tarBytes)); err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	want := manifest(t, ctx, first)
	ok("cold: %d files, %.1f MiB of tar into an empty cache in %v (%s)", files, mib(len(tarBytes)), cold.Round(time.Millisecond), e.tree)

	start = time.Now()
	if err := first.InitializeTaskCache(ctx, key.JobID, key.StepName, key.Path, 0); err != nil {
		t.Fatal(err)
	}
	ok("kept as task cache %s in the holder %s in %v (holder created, from the shim image)", key, s.holder, time.Since(start).Round(time.Millisecond))
	if err := kit.Delete(ctx, first.pod); err != nil {
		t.Fatal(err)
	}
	if err := kit.WaitGone(ctx, first.pod); err != nil {
		t.Fatal(err)
	}

	// The next build's pod, through another store (another web node, no state of its own).
	second := step("vols-build-2")
	other := newStore(kit, s.cfg)
	start = time.Now()
	if err := other.restoreTaskCache(ctx, second, key, nil); err != nil {
		t.Fatal(err)
	}
	hit := time.Since(start)
	if got := manifest(t, ctx, second); got != want {
		t.Fatalf("restored cache differs from the kept one")
	}
	ok("cache hit: restored pod to pod in %v after %s was deleted, every file, mode and mtime equal; cold fill %v (%.1fx)",
		hit.Round(time.Millisecond), first.pod, cold.Round(time.Millisecond), cold.Seconds()/hit.Seconds())

	streamingCost(t, ctx, s, second, step("vols-build-3"))

	holderLost(t, ctx, kit, s, second, step("vols-build-4"), key, want)
	gcByDesiredSet(t, ctx, s, second)
}

// holderLost: with the holder deleted a restore is an empty cache and no error; keeping the cache
// again (from kept, a pod holding it) makes a new holder, and the cache restores into fourth's pod.
func holderLost(t *testing.T, ctx context.Context, kit *k8s.Worker, s *volumeStore, kept, fourth *PodVolume, key TaskCacheKey, want string) {
	// The holder is lost: an empty cache, no error; keeping a cache again makes a new holder.
	if err := kit.Delete(ctx, s.holder); err != nil {
		t.Fatal(err)
	}
	if err := kit.WaitGone(ctx, s.holder); err != nil {
		t.Fatal(err)
	}
	if err := s.restoreTaskCache(ctx, fourth, key, nil); err != nil {
		t.Fatalf("restore with the holder gone: %v", err)
	}
	if _, n, _ := manifestOrEmpty(t, ctx, fourth); n != 0 {
		t.Fatalf("restored %d files from a deleted holder", n)
	}
	ok("holder deleted: the next restore is an empty cache and no error")
	if err := kept.InitializeTaskCache(ctx, key.JobID, key.StepName, key.Path, 0); err != nil {
		t.Fatal(err)
	}
	fifth := s.podVolume(fourth.pod, "/tmp/cache5")
	if err := s.restoreTaskCache(ctx, fifth, key, nil); err != nil || manifest(t, ctx, fifth) != want {
		t.Fatalf("after a new holder: %v", err)
	}
	ok("kept again: a new holder was made and the cache restores")
}

// gcByDesiredSet: an artifact volume and a resource cache in the holder; GC keeps what is desired.
func gcByDesiredSet(t *testing.T, ctx context.Context, s *volumeStore, src *PodVolume) {
	w := &Worker{vols: s}
	art, err := w.CreateVolumeForArtifact(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := src.InitializeResourceCache(ctx, "git:abc123")
	if err != nil {
		t.Fatal(err)
	}
	task := holderHandlePrefix + s.holder + "/" + volumeName("task", TaskCacheKey{42, "unit", "cache"}.String())
	removed, err := w.GCVolumes(ctx, []string{art.Handle(), task})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{res.Handle()}) {
		t.Fatalf("GC removed %v, want only %s", removed, res.Handle())
	}
	for h, want := range map[string]bool{art.Handle(): true, task: true, res.Handle(): false} {
		if _, found, err := w.LookupVolume(ctx, h); found != want || err != nil {
			t.Fatalf("after GC, %s found %v (%v), want %v", h, found, err, want)
		}
	}
	ok("GC by desired set: removed %s, kept the artifact volume and the task cache", res.Handle())
}

// streamingCost times the cache tree and 64 MiB of random bytes from src to dst: through the caller
// (ATC's path through the web node) raw, s2, zstd and gzip, and the shims' pod-to-pod pull.
func streamingCost(t *testing.T, ctx context.Context, s *volumeStore, src, dst *PodVolume) {
	random := s.podVolume(src.pod, "/tmp/random")
	run(t, ctx, s, src.pod, "mkdir -p /tmp/random && head -c 67108864 /dev/urandom > /tmp/random/r")
	for _, in := range []*PodVolume{src, random} {
		size, _, err := mustConnect(t, ctx, s, in.pod).FilesLength(ctx, in.path+"/")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []Compression{Raw, S2, Zstd, Gzip} {
			to := s.podVolume(dst.pod, fmt.Sprintf("/tmp/via-caller-%s%s", c, in.path))
			start := time.Now()
			rc, err := in.StreamOut(ctx, ".", c)
			if err != nil {
				t.Fatal(err)
			}
			counted := &countingReader{r: rc}
			if err := to.StreamIn(ctx, ".", c, 0, counted); err != nil {
				t.Fatal(err)
			}
			_ = rc.Close()
			d := time.Since(start)
			ok("stream %s through the caller, %s: %.1f MiB of tar in %v, %.0f MB/s, %.1f MiB on the wire (%.0f%%)",
				in.path, c, mib(int(size)), d.Round(time.Millisecond), float64(size)/d.Seconds()/1e6,
				mib(int(counted.n)), 100*float64(counted.n)/float64(size))
		}
		start := time.Now()
		url, err := s.podVolume(dst.pod, "/tmp/p2p"+in.path).GetStreamInP2PURL(ctx, ".")
		if err != nil {
			t.Fatal(err)
		}
		if err := in.StreamP2POut(ctx, ".", url, Zstd); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		ok("stream %s pod to pod (P2P URL, pull, identity): %.1f MiB in %v, %.0f MB/s",
			in.path, mib(int(size)), d.Round(time.Millisecond), float64(size)/d.Seconds()/1e6)
	}
}
