// Streaming between workers, as ATC's worker.Streamer does it and through hooks the caller controls.
// A container's inputs (and an image artifact) that are not volumes of its worker reach it through
// Config.Streamer: ATC passes its own (its compression, its volume streaming limit, its P2P setting,
// its registering of streamed resource caches in its database); without one, NewStreamer's defaults
// are used. Before each such stream the BuildStepDelegate given to FindOrCreateContainer hears
// StreamingVolume, which ATC turns into the build's "streaming volume" event. A resource cache of
// another worker that this worker already holds (streamed before and kept) is copied from here, and
// one that another container of this process is streaming into this worker is waited for
// (WaitingForStreamedVolume) rather than streamed twice.

package atcruntime

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"time"
)

// BuildStepDelegate is told what a build's log shows of FindOrCreateContainer, as ATC's
// runtime.BuildStepDelegate is (its logger argument aside).
type BuildStepDelegate interface {
	// StreamingVolume: an input (named by its mount path's last component, "for image" for the
	// image) is being copied from sourceWorker to destWorker.
	StreamingVolume(volume, sourceWorker, destWorker string)
	// WaitingForStreamedVolume: the input is a resource cache that another container of this
	// process is streaming to destWorker; this one waits for it.
	WaitingForStreamedVolume(volume, destWorker string)
}

// Streamer copies an artifact of another worker into a volume of this one: ATC's worker.Streamer.
type Streamer interface {
	Stream(ctx context.Context, src Artifact, dst Volume) error
}

// StreamerConfig is what NewStreamer's Streamer does, with ATC's settings' names and defaults.
type StreamerConfig struct {
	// Compression of streams through this process ("" is Raw; ATC's default is gzip).
	Compression Compression
	// LimitInMB refuses a stream of more than this many megabytes of tar (0: no limit).
	LimitInMB float64
	// P2P copies pod to pod when both volumes can (a volume of this package, in the same Cluster),
	// else or on failure through this process.
	P2P bool
	// P2PTimeout bounds a P2P copy (0: none); what times out is streamed through this process.
	P2PTimeout time.Duration
	// CacheStreamedVolumes keeps a streamed resource cache as one of the destination worker too
	// (ATC's --enable-cache-streamed-volumes), so the next container there copies it locally.
	CacheStreamedVolumes bool
	// Logf, if set, is told of P2P copies that fell back to streaming through this process.
	Logf func(format string, args ...any)
}

// NewStreamer is a Streamer of cfg, ATC's worker.Streamer for this package's volumes.
func NewStreamer(cfg StreamerConfig) Streamer { return streamer{cfg} }

type streamer struct{ cfg StreamerConfig }

// streamedCache is a destination volume that can keep what was streamed into it as a resource
// cache of its worker (PodVolume).
type streamedCache interface {
	InitializeStreamedResourceCache(ctx context.Context, key string) (Volume, error)
}

func (s streamer) Stream(ctx context.Context, src Artifact, dst Volume) error {
	if err := s.stream(ctx, src, dst); err != nil {
		return err
	}
	key, isCache := resourceCacheKey(src)
	keep, canKeep := dst.(streamedCache)
	if s.cfg.CacheStreamedVolumes && isCache && canKeep {
		if _, err := keep.InitializeStreamedResourceCache(ctx, key); err != nil {
			return fmt.Errorf("atcruntime: keeping the streamed resource cache %q on the destination: %w", key, err)
		}
	}
	return nil
}

func (s streamer) stream(ctx context.Context, src Artifact, dst Volume) error {
	p2pSrc, ok1 := src.(P2PVolume)
	p2pDst, ok2 := dst.(P2PVolume)
	if s.cfg.P2P && ok1 && ok2 {
		err := s.p2p(ctx, p2pSrc, p2pDst)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if s.cfg.Logf != nil {
			s.cfg.Logf("atcruntime: p2p stream of %s into %s failed, streaming through this process: %v", src.Handle(), dst.Handle(), err)
		}
	}
	out, err := src.StreamOut(ctx, ".", s.cfg.Compression)
	if err != nil {
		return err
	}
	defer out.Close()
	return dst.StreamIn(ctx, ".", s.cfg.Compression, s.cfg.LimitInMB, out)
}

// p2p is ATC's p2pStream: the destination's URL with the limit appended, the source streams to it.
func (s streamer) p2p(ctx context.Context, src, dst P2PVolume) error {
	getCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := dst.GetStreamInP2PURL(getCtx, ".")
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid stream-in URL: %w", err)
	}
	if s.cfg.LimitInMB > float64(1)/1024/1024 {
		q := u.Query()
		q.Add("limit", fmt.Sprintf("%f", s.cfg.LimitInMB))
		u.RawQuery = q.Encode()
	}
	if s.cfg.P2PTimeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, s.cfg.P2PTimeout)
		defer c()
	}
	return src.StreamP2POut(ctx, ".", u.String(), s.cfg.Compression)
}

// resourceCacheKey is the key of art when it is a resource cache of this package's volumes.
func resourceCacheKey(art Artifact) (string, bool) {
	if v, ok := art.(*HolderVolume); ok && v.Kind() == "resource" {
		return v.Key(), true
	}
	return "", false
}

// InitializeStreamedResourceCache keeps what was streamed into this volume, a resource cache of
// another worker, as the resource cache key of this one (ATC's Streamer calls it when it caches
// streamed volumes), a copy in the holder: the volume is an input its container's process may change.
func (v *PodVolume) InitializeStreamedResourceCache(ctx context.Context, key string) (Volume, error) {
	return v.s.keep(ctx, v, volumeName("resource", key), holderMeta{Kind: "resource", Key: key})
}

// inputName is how the build log names an input: its mount path's last component.
func inputName(mountPath string) string {
	if name := path.Base(mountPath); name != "/" && name != "." {
		return name
	}
	return mountPath
}
