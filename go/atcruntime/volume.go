// Volumes: a directory of a pod of the worker (a step pod, or the worker's holder pod, holder.go) as
// ATC's P2PVolume. Its handle describes it, "pod/<pod><abs path>" or "holder/<pod>/<name>", so any web
// node reading the handle reaches the same directory. StreamOut and StreamIn move the bytes through
// the caller (compress.go for the encodings and the limit); copies between two pods of the worker
// are pulls by the destination's shim with a read grant on the source (PROTOCOL.md 4.10, 4.11), so
// the bytes never pass through the caller.

package atcruntime

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// kitPods is what volumes need of the Go kit's worker; *k8s.Worker has all of it.
type kitPods interface {
	Name() string
	Namespace() string
	Token(pod string) string
	Connect(ctx context.Context, pod string) (*shim.Client, error)
	PullSource(pod string) (source, pin string, err error)
	Get(pod string) *corev1.Pod
	Create(ctx context.Context, spec k8s.StepSpec) (*corev1.Pod, error)
	WaitReady(ctx context.Context, pod string) (string, error)
	Delete(ctx context.Context, pod string) error
}

var _ kitPods = (*k8s.Worker)(nil)

// Handle prefixes.
const (
	podHandlePrefix    = "pod/"
	holderHandlePrefix = "holder/"
)

// PodVolume is the directory Path (absolute) of pod Pod of the worker, as ATC's P2PVolume.
type PodVolume struct {
	s      *volumeStore
	pod    string
	path   string
	handle string
	// owner, when set, owns everything streamed or copied in (a container's input, owned by its
	// user as Garden's input volumes are); nil keeps the owners of the stream or the source.
	owner *shim.Owner
}

var _ P2PVolume = (*PodVolume)(nil)

// podVolume is pod's directory dir (absolute; cleaned) as a volume.
func (s *volumeStore) podVolume(pod, dir string) *PodVolume {
	dir = path.Clean("/" + dir)
	return &PodVolume{s: s, pod: pod, path: dir, handle: podHandlePrefix + pod + dir}
}

// parsePodHandle is the pod and directory of a "pod/<pod><abs path>" handle.
func parsePodHandle(h string) (pod, dir string, ok bool) {
	rest, found := strings.CutPrefix(h, podHandlePrefix)
	if !found {
		return "", "", false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	pod, dir = rest[:i], rest[i:]
	if !validPodName(pod) || path.Clean(dir) != dir {
		return "", "", false
	}
	return pod, dir, true
}

// validPodName is a DNS label, as pod names of step pods are.
func validPodName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Handle is the volume's self-describing handle.
func (v *PodVolume) Handle() string { return v.handle }

// Source is the worker's name.
func (v *PodVolume) Source() string { return v.s.worker }

// Pod is the pod holding the volume.
func (v *PodVolume) Pod() string { return v.pod }

// Path is the volume's absolute directory in its pod.
func (v *PodVolume) Path() string { return v.path }

// sub is the absolute path of p ("." or relative, no "..") inside the volume, or an error.
func (v *PodVolume) sub(p string) (string, error) {
	if p == "" {
		p = "."
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("atcruntime: volume path %q must be relative", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("atcruntime: volume path %q leaves the volume", p)
		}
	}
	return path.Join(v.path, p), nil
}

// StreamOut is a tar stream of path in the given compression: of the volume's contents for "." (or a
// path ending with "/"), else one entry named after path's last component, as ATC's StreamFile reads
// it. Cut connections are resumed (shim.Client.OpenFilesResumable).
func (v *PodVolume) StreamOut(ctx context.Context, p string, compression Compression) (io.ReadCloser, error) {
	if err := checkCompression(compression); err != nil {
		return nil, err
	}
	src, err := v.sub(p)
	if err != nil {
		return nil, err
	}
	if p == "" || p == "." || strings.HasSuffix(p, "/") {
		src = strings.TrimSuffix(src, "/") + "/"
	}
	c, err := v.s.pods.Connect(ctx, v.pod)
	if err != nil {
		return nil, err
	}
	rc, err := c.OpenFilesResumable(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("atcruntime: stream out of %s: %w", v.handle, err)
	}
	return encodeStream(rc, compression)
}

// StreamIn extracts the tar stream r, in the given compression, under path, refusing more than
// limitInMB megabytes of decompressed tar (under one byte, 0 included: no limit). All or nothing: a
// stream cut, corrupt or over the limit leaves the directory as it was (PROTOCOL.md 4.8); over the
// limit is a *StreamLimitError. Into a container's input, every entry belongs to the container's user.
func (v *PodVolume) StreamIn(ctx context.Context, p string, compression Compression, limitInMB float64, r io.Reader) error {
	limit, err := limitBytes(limitInMB)
	if err != nil {
		return err
	}
	dst, err := v.sub(p)
	if err != nil {
		return err
	}
	dec, err := decoder(r, compression)
	if err != nil {
		return fmt.Errorf("atcruntime: stream into %s: %w", v.handle, err)
	}
	defer dec.Close()
	c, err := v.s.pods.Connect(ctx, v.pod)
	if err != nil {
		return err
	}
	lr := &limitedReader{r: dec, limit: limit, limitMB: limitInMB}
	err = c.PutFilesAs(ctx, dst, v.owner, lr)
	if lr.exceeded != nil {
		return lr.exceeded
	}
	if err != nil {
		return fmt.Errorf("atcruntime: stream into %s: %w", v.handle, err)
	}
	return nil
}

// GetStreamInP2PURL is a signed URL naming path of this volume as a destination (p2p.go).
func (v *PodVolume) GetStreamInP2PURL(ctx context.Context, p string) (string, error) {
	dst, err := v.sub(p)
	if err != nil {
		return "", err
	}
	return v.s.signer.sign(p2pTarget{Pod: v.pod, Path: dst, Owner: v.owner}, time.Now()), nil
}

// StreamP2POut copies path of this volume to the destination of destURL pod to pod (p2p.go): a URL
// of this worker, or of another worker of its Cluster (cluster.go).
func (v *PodVolume) StreamP2POut(ctx context.Context, p, destURL string, compression Compression) error {
	if err := checkCompression(compression); err != nil {
		return err
	}
	src, err := v.sub(p)
	if err != nil {
		return err
	}
	to, dst, err := v.s.resolveURL(destURL, time.Now())
	if err != nil {
		return err
	}
	return v.s.copyLimited(ctx, v.pod, src, to, dst)
}

// streamInput puts art's contents into dst, owned by owner when set (Garden's input volumes belong
// to the task's user), else by the source's owners: pod to pod when art is a volume of this worker,
// else through the caller (art.StreamOut into dst.StreamIn, raw, no limit). Inputs of containers
// go through the worker's Streamer instead (streamer.go).
func (s *volumeStore) streamInput(ctx context.Context, dst *PodVolume, art Artifact, owner *shim.Owner) error {
	if src, ok := s.localVolume(art); ok {
		return s.copyDir(ctx, src.pod, src.path, dst.pod, dst.path, owner)
	}
	rc, err := art.StreamOut(ctx, ".", Raw)
	if err != nil {
		return err
	}
	defer rc.Close()
	in := *dst
	in.owner = owner
	return in.StreamIn(ctx, ".", Raw, 0, rc)
}

// localVolume is art as a directory of a pod of this worker, if it is one.
func (s *volumeStore) localVolume(art Artifact) (*PodVolume, bool) {
	switch v := art.(type) {
	case *PodVolume:
		return v, v.s.worker == s.worker && v.s.pods.Namespace() == s.pods.Namespace()
	case *HolderVolume:
		return v.PodVolume, v.s.worker == s.worker && v.s.pods.Namespace() == s.pods.Namespace()
	}
	return nil, false
}
