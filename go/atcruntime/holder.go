// The holder: volumes that outlive the step pods that made them (task caches, resource caches,
// uploads of `fly execute -i`) live in one long-lived pod per worker, a step pod that runs no
// process. Its shim keeps directories that later steps pull pod to pod with grants, and it is created
// lazily, the first time a volume needs it, and again after it is gone.
//
// Everything the holder holds is described in the holder itself, so any web node, and a restarted
// one, finds it without state of its own:
//
//	/stepshim-volumes/meta/<name>        one small JSON file per volume (holderMeta)
//	/stepshim-volumes/data/<name>/<gen>  the volume's contents, one generation per write
//
// (DefaultHolderDir; VolumeConfig.HolderDir may move it.)
//
// A volume's handle is "holder/<holder pod>/<name>". Replacing a volume's contents pulls a new
// generation, then replaces the meta file (a single file is replaced whole, PROTOCOL.md 4.8), then
// removes the old generation, so a reader sees the old contents or the new, never a mix.

package atcruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// VolumeConfig is how volumes that outlive step pods are kept (Config.Volumes).
type VolumeConfig struct {
	// Holder is the holder pod's spec, its Name aside: an Image (any image the shim can run on as
	// PID 1; nothing else runs in it, e.g. the worker's step image), the Delivery of the worker's
	// step pods, and resources or placement if wanted. Without an Image no holder is made: task
	// caches are always empty, and InitializeTaskCache, InitializeResourceCache and
	// CreateVolumeForArtifact fail.
	Holder k8s.StepSpec
	// HolderName is the holder pod's name; empty means "<worker>-volumes".
	HolderName string
	// HolderDir is the directory of the holder pod where volumes are kept; empty means
	// DefaultHolderDir.
	HolderDir string
	// HolderClaim, with a Size, keeps the volumes on a PersistentVolumeClaim mounted at HolderDir,
	// so that they outlive the holder pod: one made again mounts the same claim and finds them.
	// Without one they live in the holder pod's own file system and go with it (reported missing).
	HolderClaim HolderClaim
	// P2PURLTTL is how long a URL of GetStreamInP2PURL stays valid; zero means DefaultP2PURLTTL.
	P2PURLTTL time.Duration
	// Logf, if set, is told what best-effort operations gave up on (a task cache not restored).
	Logf func(format string, args ...any)
}

// HolderClaim is the holder's PersistentVolumeClaim: named as the holder pod, ReadWriteOnce, of
// StorageClass (empty: the cluster's default) and Size (a quantity, "20Gi"), created if missing
// (k8s.Worker.EnsureClaim; the worker's Role needs persistentvolumeclaims get and create) and left
// when the holder goes. Delete it with the worker (k8s.Worker.DeleteClaim).
type HolderClaim struct {
	StorageClass, Size string
}

// Where the holder keeps volumes.
const (
	// DefaultHolderDir is where the holder keeps volumes unless VolumeConfig.HolderDir says otherwise.
	DefaultHolderDir = "/stepshim-volumes"
	// HolderStep is the step label and annotation of holder pods (k8s.StepLabel).
	HolderStep = "stepshim-volume-holder"
)

// volumeStore is the worker's volumes: step pods' directories and the holder's.
type volumeStore struct {
	pods   kitPods
	worker string
	cfg    VolumeConfig
	holder string
	// meta and data are the holder's directories of meta files and of contents.
	meta, data string
	signer     *p2pSigner
	// cluster holds the other workers whose P2P URLs this one acts on; nil: none.
	cluster *Cluster
	// lostAfter is Config.NodeLostAfter: how long a holder may answer nothing before it is lost.
	lostAfter time.Duration
	// mu serializes this process's creations of the holder.
	mu sync.Mutex
}

// newVolumeStore is the volumes of the kit's worker with cfg.Volumes.
func newVolumeStore(kit *k8s.Worker, cfg Config) *volumeStore {
	s := newStore(kit, cfg.Volumes)
	s.join(cfg.Cluster)
	s.lostAfter = cfg.nodeLostAfter()
	return s
}

// join makes s a worker of c (nil: none).
func (s *volumeStore) join(c *Cluster) {
	if c != nil {
		s.cluster = c
		c.add(s)
	}
}

func newStore(pods kitPods, cfg VolumeConfig) *volumeStore {
	holder := cfg.HolderName
	if holder == "" {
		holder = dnsLabel(pods.Name() + "-volumes")
	}
	if holder == "" || holder == "volumes" {
		holder = "stepshim-volumes"
	}
	dir := path.Clean("/" + cfg.HolderDir)
	if cfg.HolderDir == "" {
		dir = DefaultHolderDir
	}
	return &volumeStore{pods: pods, worker: pods.Name(), cfg: cfg, holder: holder, meta: dir + "/meta", data: dir + "/data",
		signer: newSigner(pods, cfg.P2PURLTTL), lostAfter: (&Config{}).nodeLostAfter()}
}

// dnsLabel is s lowercased with characters outside [a-z0-9-] as '-', trimmed to 63 characters and
// alphanumeric at both ends.
func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b[:min(len(b), 63)]), "-")
}

// HolderPod is the holder pod's name: a pod of the worker that container GC must keep.
func (s *volumeStore) HolderPod() string { return s.holder }

// ErrNoHolder is the error of volume operations that need a holder when VolumeConfig has none.
var ErrNoHolder = errors.New("atcruntime: no holder pod configured (VolumeConfig.Holder.Image)")

// ensureHolder makes sure the holder pod exists and is ready, creating it if missing (another web
// node creating it at the same time is fine) and replacing it if it failed.
func (s *volumeStore) ensureHolder(ctx context.Context) error {
	if s.cfg.Holder.Image == "" && s.cfg.Holder.ImageFrom == nil {
		return ErrNoHolder
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pods.Get(s.holder); p != nil && p.DeletionTimestamp == nil && k8s.ProgressOf(p).Stage != k8s.Failed {
		_, err := s.pods.WaitReady(ctx, s.holder)
		return err
	}
	if p := s.pods.Get(s.holder); p != nil {
		if err := s.pods.Delete(ctx, s.holder); err != nil {
			return err
		}
		if err := waitGone(ctx, s.pods, s.holder); err != nil {
			return err
		}
	}
	spec := s.cfg.Holder
	spec.Name, spec.Step = s.holder, HolderStep
	if claim := s.cfg.HolderClaim; claim.Size != "" {
		kit, ok := s.pods.(interface {
			EnsureClaim(ctx context.Context, name, storageClass, size string) error
		})
		if !ok {
			return errors.New("atcruntime: VolumeConfig.HolderClaim needs a worker that makes claims")
		}
		if err := kit.EnsureClaim(ctx, s.holder, claim.StorageClass, claim.Size); err != nil {
			return fmt.Errorf("atcruntime: the holder's claim: %w", err)
		}
		dir := strings.TrimSuffix(s.meta, "/meta")
		spec.Claims = append(append([]k8s.ClaimMount(nil), spec.Claims...), k8s.ClaimMount{Claim: s.holder, MountPath: dir})
	}
	if _, err := s.pods.Create(ctx, spec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("atcruntime: creating the holder pod %s: %w", s.holder, err)
	}
	if _, err := s.pods.WaitReady(ctx, s.holder); err != nil {
		return fmt.Errorf("atcruntime: the holder pod %s: %w", s.holder, err)
	}
	return nil
}

// waitGone waits until pod is no longer in the worker's cache.
func waitGone(ctx context.Context, pods kitPods, pod string) error {
	if w, ok := pods.(interface {
		WaitGone(context.Context, string) error
	}); ok {
		return w.WaitGone(ctx, pod)
	}
	for pods.Get(pod) != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// holderMeta is what the holder keeps about one volume, in s.meta/<name>.
type holderMeta struct {
	// Kind is "task", "resource" or "artifact".
	Kind string `json:"kind"`
	// Key is the cache's key as the caller gave it (a task cache's job/step/path, a resource
	// cache's key); empty for an artifact.
	Key string `json:"key,omitempty"`
	// TeamID is the team of an artifact volume.
	TeamID int `json:"team_id,omitempty"`
	// Container is the pod an artifact volume was made for (an image copy), kept while it exists.
	Container string `json:"container,omitempty"`
	// Gen is the current generation: the contents are in s.data/<name>/<gen>. Empty while the
	// volume is kept in place (inplace.go), in directory Path of step pod Pod.
	Gen  string `json:"gen"`
	Pod  string `json:"pod,omitempty"`
	Path string `json:"path,omitempty"`
	// Updated is when Gen was written; Expires, if set, when the volume counts as gone.
	Updated time.Time  `json:"updated"`
	Expires *time.Time `json:"expires,omitempty"`
}

// HolderVolume is a volume kept by the holder pod: a P2PVolume of its current generation.
type HolderVolume struct {
	*PodVolume
	name string
	meta holderMeta
}

// Kind is "task", "resource" or "artifact"; Key the cache's key (holderMeta).
func (v *HolderVolume) Kind() string { return v.meta.Kind }

// Key is the cache key the volume was made for, empty for an artifact.
func (v *HolderVolume) Key() string { return v.meta.Key }

func (s *volumeStore) holderVolume(name string, m holderMeta) *HolderVolume {
	pv := s.podVolume(s.holder, s.data+"/"+name+"/"+m.Gen)
	if m.Pod != "" {
		pv = s.podVolume(m.Pod, m.Path)
	}
	pv.handle = holderHandlePrefix + s.holder + "/" + name
	return &HolderVolume{PodVolume: pv, name: name, meta: m}
}

// holderShim is a client of a ready holder, or found false when there is none (nothing is created
// but the holder of a claim).
func (s *volumeStore) holderShim(ctx context.Context) (*shim.Client, bool, error) {
	if s.cfg.HolderClaim.Size != "" {
		// The volumes are on the claim whether or not a holder pod runs: make one to reach them.
		if err := s.ensureHolder(ctx); err != nil {
			return nil, false, err
		}
	}
	// Not the pod's Ready condition: the kit takes a pod as ready once its shim answers, up to a
	// second before the kubelet says so (k8s.Worker.WaitReady), and a holder just made by
	// ensureHolder is used at once. A holder that does not serve yet fails Connect: no holder.
	p := s.pods.Get(s.holder)
	if p == nil || p.DeletionTimestamp != nil || p.Status.PodIP == "" || k8s.ProgressOf(p).Stage == k8s.Failed {
		return nil, false, nil
	}
	c, err := s.pods.Connect(ctx, s.holder)
	return c, err == nil, err
}

// metaCtx bounds a request for meta files, small answers: a holder on a lost node answers none
// (holderlost.go), and a kept connection to it would otherwise wait for TCP to give up.
func (s *volumeStore) metaCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(10*time.Second, s.lostAfter/2))
}

// readMeta is volume name's meta, found false when the holder or the volume is missing or expired.
func (s *volumeStore) readMeta(ctx context.Context, c *shim.Client, name string) (holderMeta, bool, error) {
	ctx, cancel := s.metaCtx(ctx)
	defer cancel()
	var buf bytes.Buffer
	if err := c.GetFiles(ctx, s.meta+"/"+name, &buf); err != nil {
		if shim.IsNotFound(err) {
			return holderMeta{}, false, nil
		}
		return holderMeta{}, false, err
	}
	tr := tar.NewReader(&buf)
	if _, err := tr.Next(); err != nil {
		return holderMeta{}, false, fmt.Errorf("atcruntime: holder meta %s: %w", name, err)
	}
	var m holderMeta
	if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
		return holderMeta{}, false, fmt.Errorf("atcruntime: holder meta %s: %w", name, err)
	}
	if m.Expires != nil && time.Now().After(*m.Expires) {
		return m, false, nil
	}
	if m.Pod != "" {
		// In place: there while its pod lives.
		p := s.pods.Get(m.Pod)
		return m, p != nil && p.DeletionTimestamp == nil && k8s.ProgressOf(p).Stage != k8s.Failed, nil
	}
	return m, m.Gen != "", nil
}

// writeMeta replaces volume name's meta file whole.
func (s *volumeStore) writeMeta(ctx context.Context, c *shim.Client, name string, m holderMeta) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Now(), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return c.PutFiles(ctx, s.meta, &buf)
}

// listMeta is the names of the holder's volumes with their meta (expired ones included).
func (s *volumeStore) listMeta(ctx context.Context, c *shim.Client) (map[string]holderMeta, error) {
	ctx, cancel := s.metaCtx(ctx)
	defer cancel()
	rc, err := c.OpenFiles(ctx, s.meta+"/")
	if err != nil {
		if shim.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	defer rc.Close()
	out := map[string]holderMeta{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("atcruntime: listing holder volumes: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || strings.Contains(name, "/") {
			continue
		}
		var m holderMeta
		if json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m) == nil {
			out[name] = m
		}
	}
}

// removeVolume removes volume name: its meta first (it is gone for every reader at once), then its
// data with every generation.
func (s *volumeStore) removeVolume(ctx context.Context, c *shim.Client, name string) error {
	for _, p := range []string{s.meta + "/" + name, s.data + "/" + name} {
		if err := c.RemoveFiles(ctx, p); err != nil && !shim.IsNotFound(err) {
			return err
		}
	}
	return nil
}
