// A container's inputs: each copied into its directory of the step pod, owned by the container's
// user, several at once as Garden streams them. A volume of this worker is pulled pod to pod; a
// resource cache of another worker that this worker holds too is pulled from here; anything else
// goes through the worker's Streamer, the delegate told first. While one container of this
// process streams a resource cache into this worker for a Streamer that keeps streamed caches,
// the others needing it wait for it and then copy it locally.

package atcruntime

import (
	"context"
	"sync"
)

// quietDelegate is the delegate of a caller that gave none.
type quietDelegate struct{}

func (quietDelegate) StreamingVolume(string, string, string)  {}
func (quietDelegate) WaitingForStreamedVolume(string, string) {}

// fetchInput puts art's contents into dst (dst.owner owning them).
func (w *Worker) fetchInput(ctx context.Context, dst *PodVolume, art Artifact, delegate BuildStepDelegate) error {
	if _, ok := w.vols.localVolume(art); ok {
		return w.vols.streamInput(ctx, dst, art, dst.owner)
	}
	name := inputName(dst.path)
	key, isCache := resourceCacheKey(art)
	for isCache {
		local, found, err := w.LookupResourceCache(ctx, key)
		if err == nil && found {
			return w.vols.streamInput(ctx, dst, local, dst.owner)
		}
		if !w.keepsStreamedCaches() {
			break
		}
		done, first := w.inflight.start(key)
		if first {
			defer w.inflight.end(key)
			break
		}
		delegate.WaitingForStreamedVolume(name, w.vols.worker)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
		}
	}
	delegate.StreamingVolume(name, art.Source(), w.vols.worker)
	return w.cfg.streamer().Stream(ctx, art, dst)
}

// keepsStreamedCaches says whether the worker's Streamer keeps the resource caches it streams.
func (w *Worker) keepsStreamedCaches() bool {
	s, ok := w.cfg.streamer().(streamer)
	return ok && s.cfg.CacheStreamedVolumes
}

// inflight is the resource caches this process is streaming into the worker, by key.
type inflight struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

// start marks key as being streamed: first is true for the caller that streams it, who must call
// end when done; the others get a channel closed then.
func (f *inflight) start(key string) (done chan struct{}, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.keys[key]; ok {
		return ch, false
	}
	if f.keys == nil {
		f.keys = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.keys[key] = ch
	return ch, true
}

func (f *inflight) end(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.keys[key]; ok {
		close(ch)
		delete(f.keys, key)
	}
}

// parallel runs f for 0..n-1, at most limit at once, and returns the first error; the others'
// ctx is cancelled once one fails.
func parallel(ctx context.Context, n, limit int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}(i)
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
