// Streaming between workers: P2P across two workers of one Cluster (each its own key and
// namespace), refused without it; the default Streamer's limit, fallback and kept caches; a
// container's inputs fetched in parallel with the delegate told, a resource cache streamed once
// for containers that need it at the same time.

package atcruntime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// twoWorkers is workers w1 (pod step-a holding files at src) and w2 (pod step-b), in namespaces
// of their own, each with a holder; joined in one Cluster when cluster is set.
func twoWorkers(t *testing.T, files map[string][]byte, cluster bool) (a, b *volumeStore, src string) {
	lpA, lpB := newLocalPods(t, "w1"), newLocalPods(t, "w2")
	lpB.ns = "other"
	lpA.startPod("step-a")
	lpB.startPod("step-b")
	a, _ = testStore(t, lpA)
	b, _ = testStore(t, lpB)
	if cluster {
		c := NewCluster()
		a.join(c)
		b.join(c)
	}
	src = t.TempDir()
	writeTree(t, src, files)
	return a, b, src
}

func TestP2PBetweenWorkersOfACluster(t *testing.T) {
	files := sampleTree()
	ctx := testCtx(t)
	a, b, src := twoWorkers(t, files, true)
	dst := t.TempDir()
	raw, err := b.podVolume("step-b", dst).GetStreamInP2PURL(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(raw, "worker=w2") {
		t.Fatalf("the URL does not name its worker: %s", raw)
	}
	if err := a.podVolume("step-a", src).StreamP2POut(ctx, ".", atcAppendLimit(t, raw, 10), Gzip); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, dst))
	// A URL whose worker was changed to the source's own is refused: the signature names w2.
	forged := strings.Replace(raw, "worker=w2", "worker=w1", 1)
	if err := a.podVolume("step-a", src).StreamP2POut(ctx, ".", forged, Raw); !errors.Is(err, ErrP2PURL) {
		t.Fatalf("a URL whose worker was changed: %v", err)
	}
	// Without a Cluster (the positive control), the same copy is refused as another worker's.
	a2, b2, src2 := twoWorkers(t, files, false)
	raw2, _ := b2.podVolume("step-b", t.TempDir()).GetStreamInP2PURL(ctx, ".")
	err = a2.podVolume("step-a", src2).StreamP2POut(ctx, ".", raw2, Raw)
	if !errors.Is(err, ErrP2PURL) || !strings.Contains(err.Error(), "not in this worker's Cluster") {
		t.Fatalf("without a Cluster: %v", err)
	}
	// A Garden worker's baggageclaim URL is refused at once, so ATC streams through the web node.
	err = a2.podVolume("step-a", src2).StreamP2POut(ctx, ".", "http://10.0.0.7:7788/volumes/v1/stream-in?path=.", Raw)
	if !errors.Is(err, ErrP2PURL) {
		t.Fatalf("a baggageclaim URL: %v", err)
	}
}

// TestP2PURLOwner: the owner a destination volume gives its URL is signed, and the copy's entries
// get it.
func TestP2PURLOwner(t *testing.T) {
	lp := newLocalPods(t, "w1")
	signer := newSigner(lp, time.Minute)
	now := time.Unix(1_800_000_000, 0)
	raw := signer.sign(p2pTarget{Pod: "step-b", Path: "/in", Owner: ownerOf(1000, 1001)}, now)
	got, err := signer.verify(raw, now)
	if err != nil || got.Owner == nil || *got.Owner != *ownerOf(1000, 1001) || got.Worker != "w1" {
		t.Fatalf("verify: %+v, %v", got, err)
	}
	for _, forged := range []string{strings.Replace(raw, "owner=1000%3A1001", "owner=0%3A0", 1),
		strings.Replace(raw, "&owner=1000%3A1001", "", 1)} {
		if forged == raw {
			t.Fatalf("the test did not change %s", raw)
		}
		if _, err := signer.verify(forged, now); !errors.Is(err, ErrP2PURL) {
			t.Fatalf("%s accepted: %v", forged, err)
		}
	}
}

func TestStreamerLimitFallbackAndKeptCaches(t *testing.T) {
	files := sampleTree()
	ctx := testCtx(t)
	a, b, src := twoWorkers(t, files, false)
	var logged atomic.Int32
	logf := func(f string, args ...any) { logged.Add(1); t.Logf(f, args...) }
	// P2P between workers of no Cluster fails; the Streamer falls back through this process.
	s := NewStreamer(StreamerConfig{Compression: Zstd, P2P: true, Logf: logf})
	dst := t.TempDir()
	if err := s.Stream(ctx, a.podVolume("step-a", src), b.podVolume("step-b", dst)); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, dst))
	if logged.Load() != 1 {
		t.Fatalf("the fallback was logged %d times, want 1", logged.Load())
	}
	// The limit holds through this process too.
	small := NewStreamer(StreamerConfig{Compression: Gzip, LimitInMB: 0.0001})
	var lim *StreamLimitError
	if err := small.Stream(ctx, a.podVolume("step-a", src), b.podVolume("step-b", t.TempDir())); !errors.As(err, &lim) {
		t.Fatalf("over the limit: %v", err)
	}
	// A resource cache of w1 streamed into w2 is kept as w2's when the Streamer caches streamed
	// volumes, and not otherwise.
	cache, err := a.podVolume("step-a", src).InitializeResourceCache(ctx, "git#v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stream(ctx, cache, b.podVolume("step-b", t.TempDir())); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := b.lookupName(ctx, volumeName("resource", "git#v1")); found {
		t.Fatal("kept without CacheStreamedVolumes")
	}
	keeping := NewStreamer(StreamerConfig{P2P: true, CacheStreamedVolumes: true})
	if err := keeping.Stream(ctx, cache, b.podVolume("step-b", t.TempDir())); err != nil {
		t.Fatal(err)
	}
	kept, found, err := b.lookupName(ctx, volumeName("resource", "git#v1"))
	if err != nil || !found || kept.Source() != "w2" {
		t.Fatalf("the streamed cache on w2: %v, %v", found, err)
	}
}

// events records what a delegate is told.
type events struct {
	mu  sync.Mutex
	all []string
}

func (e *events) StreamingVolume(v, from, to string) {
	e.add("streaming " + v + " " + from + "->" + to)
}
func (e *events) WaitingForStreamedVolume(v, to string) {
	e.add("waiting " + v + " " + to)
}
func (e *events) add(s string) { e.mu.Lock(); e.all = append(e.all, s); e.mu.Unlock() }
func (e *events) count(prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.all {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// TestInputsOfAnotherWorker: four containers of w2 that need w1's resource cache at once stream it
// once (the others wait, then copy w2's kept copy); a later one copies it locally, told nothing.
func TestInputsOfAnotherWorker(t *testing.T) {
	files := sampleTree()
	ctx := testCtx(t)
	a, b, src := twoWorkers(t, files, true)
	cache, err := a.podVolume("step-a", src).InitializeResourceCache(ctx, "git#v2")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{vols: b, cfg: &Config{Streamer: NewStreamer(StreamerConfig{P2P: true, CacheStreamedVolumes: true})}}
	ev := &events{}
	dirs := make([]string, 4)
	err = parallel(ctx, len(dirs), len(dirs), func(ctx context.Context, i int) error {
		dirs[i] = filepath.Join(t.TempDir(), "source")
		return w.fetchInput(ctx, b.podVolume("step-b", dirs[i]), cache, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		sameTree(t, files, readTree(t, d))
	}
	if n := ev.count("streaming source w1->w2"); n != 1 {
		t.Fatalf("streamed %d times, want once: %v", n, ev.all)
	}
	if n := ev.count("waiting source w2"); n < 1 {
		t.Logf("no container waited (the first had finished before the others looked): %v", ev.all)
	}
	later := &events{}
	d := filepath.Join(t.TempDir(), "source")
	if err := w.fetchInput(ctx, b.podVolume("step-b", d), cache, later); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, d))
	if len(later.all) != 0 {
		t.Fatalf("a cache w2 holds was streamed again: %v", later.all)
	}
}

func TestParallelBoundsAndFirstError(t *testing.T) {
	var running, most atomic.Int32
	err := parallel(context.Background(), 12, 3, func(ctx context.Context, i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	if err != nil || most.Load() != 3 {
		t.Fatalf("%v, at most %d at once, want 3", err, most.Load())
	}
	boom := errors.New("boom")
	var started atomic.Int32
	err = parallel(context.Background(), 50, 2, func(ctx context.Context, i int) error {
		started.Add(1)
		if i == 1 {
			return boom
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, boom) || started.Load() > 4 {
		t.Fatalf("%v after %d started, want boom and no more than a few", err, started.Load())
	}
}

func ownerOf(uid, gid uint32) *shim.Owner { return &shim.Owner{UID: uid, GID: gid} }
