// Task caches, resource caches and artifact volumes, kept by the holder (holder.go), and the worker's
// volume methods: LookupVolume, CreateVolumeForArtifact, LookupResourceCache and GCVolumes.
//
// A task cache is keyed as Concourse keys it, by job, step and path; it is best effort: a cache that
// is missing, expired or lost with its holder restores as an empty directory, never a failure. A
// resource cache is keyed by a string of the caller's (ATC's resource cache id or version).

package atcruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"stepshim.dev/go/shim"
)

// TaskCacheKey names a task cache as Concourse does.
type TaskCacheKey struct {
	JobID          int
	StepName, Path string
}

func (k TaskCacheKey) String() string {
	// Cleaned as Garden's look-up cleans it: "cache/" and "./cache" are the cache "cache".
	return strconv.Itoa(k.JobID) + "/" + k.StepName + "/" + path.Clean(k.Path)
}

// volumeName is the holder's name for a cache of kind and key: the kind and a hash of the key, so any
// key fits a file name and every web node computes the same name.
func volumeName(kind, key string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + key))
	return kind + "-" + hex.EncodeToString(sum[:20])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// InitializeTaskCache keeps this volume's contents as the task cache of (jobID, stepName, path),
// replacing the previous one whole; ttl > 0 makes it count as gone ttl after this call. The copy is
// pod to pod into the holder, created if needed. An error leaves the previous cache in place; the
// cache being best effort, a caller may log it and go on.
func (v *PodVolume) InitializeTaskCache(ctx context.Context, jobID int, stepName, path string, ttl time.Duration) error {
	key := TaskCacheKey{JobID: jobID, StepName: stepName, Path: path}.String()
	m := holderMeta{Kind: "task", Key: key}
	if ttl > 0 {
		exp := time.Now().Add(ttl)
		m.Expires = &exp
	}
	_, err := v.s.keep(ctx, v, volumeName("task", key), m)
	return err
}

// InitializeResourceCache keeps this volume as the resource cache key and returns it, a volume of
// the holder that outlives this one's pod: marked in place, as Garden does, when it is a directory of
// a step pod (moved into the holder when container GC deletes the pod, inplace.go), else copied.
func (v *PodVolume) InitializeResourceCache(ctx context.Context, key string) (Volume, error) {
	m := holderMeta{Kind: "resource", Key: key}
	if v.pod != v.s.holder {
		return v.s.markInPlace(ctx, v, volumeName("resource", key), m)
	}
	return v.s.keep(ctx, v, volumeName("resource", key), m)
}

// keep copies src into a new generation of the holder's volume name and makes it current.
func (s *volumeStore) keep(ctx context.Context, src *PodVolume, name string, m holderMeta) (*HolderVolume, error) {
	c, old, hadOld, err := s.openMeta(ctx, name)
	if err != nil {
		return nil, err
	}
	m.Gen, m.Updated = randomHex(8), time.Now().UTC()
	if err := s.copyDir(ctx, src.pod, src.path, s.holder, s.data+"/"+name+"/"+m.Gen, nil); err != nil {
		return nil, fmt.Errorf("atcruntime: keeping %s as %s %q: %w", src.handle, m.Kind, m.Key, err)
	}
	if err := s.writeMeta(ctx, c, name, m); err != nil {
		return nil, err
	}
	if hadOld && old.Gen != "" && old.Gen != m.Gen {
		_ = c.RemoveFiles(ctx, s.data+"/"+name+"/"+old.Gen)
	}
	return s.holderVolume(name, m), nil
}

// openMeta is a client of the holder (created if missing) and volume name's meta, if it has one.
func (s *volumeStore) openMeta(ctx context.Context, name string) (*shim.Client, holderMeta, bool, error) {
	if err := s.ensureHolder(ctx); err != nil {
		return nil, holderMeta{}, false, err
	}
	c, err := s.pods.Connect(ctx, s.holder)
	if err != nil {
		return nil, holderMeta{}, false, err
	}
	m, found, err := s.readMeta(ctx, c, name)
	return c, m, found, err
}

// restoreTaskCache copies the task cache key into dst, every entry owned by owner (the step's user,
// so that a task that is not root can write its cache; nil keeps the cache's owners), best effort:
// no holder, no cache, an expired one or a copy that fails leave dst as it is (empty) and return
// nil; only ctx's end is an error.
func (s *volumeStore) restoreTaskCache(ctx context.Context, dst *PodVolume, key TaskCacheKey, owner *shim.Owner) error {
	name := volumeName("task", key.String())
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		c, ok, err := s.holderShim(ctx)
		if !ok {
			last = err
			break
		}
		m, found, err := s.readMeta(ctx, c, name)
		if s.holderLost(ctx, c, err) {
			err = nil
		}
		if !found {
			last = err
			break
		}
		// A copy that fails because another node replaced the cache meanwhile is tried once more.
		if last = s.copyDir(ctx, s.holder, s.data+"/"+name+"/"+m.Gen, dst.pod, dst.path, owner); last == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if last != nil {
		s.logf("task cache %s not restored into %s (an empty cache instead): %v", key, dst.handle, last)
	}
	// The step finds its cache directory, empty, as in Concourse.
	if err := s.emptyDir(ctx, dst.pod, dst.path); err != nil && ctx.Err() == nil {
		s.logf("task cache %s: creating the empty %s: %v", key, dst.handle, err)
	}
	return ctx.Err()
}

// emptyDir creates dir in pod if it is missing (an empty upload; what is there stays).
func (s *volumeStore) emptyDir(ctx context.Context, pod, dir string) error {
	c, err := s.pods.Connect(ctx, pod)
	if err != nil {
		return err
	}
	var empty bytes.Buffer
	_ = tar.NewWriter(&empty).Close()
	return c.PutFiles(ctx, dir, &empty)
}

func (s *volumeStore) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// createArtifactVolume is an empty volume of the holder for teamID; container, if set, is the pod
// it was made for, whose life keeps it (an image copy).
func (s *volumeStore) createArtifactVolume(ctx context.Context, teamID int, container string) (*HolderVolume, error) {
	if err := s.ensureHolder(ctx); err != nil {
		return nil, err
	}
	c, err := s.pods.Connect(ctx, s.holder)
	if err != nil {
		return nil, err
	}
	name := "artifact-" + randomHex(16)
	m := holderMeta{Kind: "artifact", TeamID: teamID, Container: container, Gen: randomHex(8), Updated: time.Now().UTC()}
	if err := s.emptyDir(ctx, s.holder, s.data+"/"+name+"/"+m.Gen); err != nil {
		return nil, err
	}
	if err := s.writeMeta(ctx, c, name, m); err != nil {
		return nil, err
	}
	return s.holderVolume(name, m), nil
}

// lookup is the volume of handle: a step pod's directory while the pod exists, or a volume the
// holder keeps.
func (s *volumeStore) lookup(ctx context.Context, handle string) (Volume, bool, error) {
	if pod, dir, ok := parsePodHandle(handle); ok {
		p := s.pods.Get(pod)
		if p == nil || p.DeletionTimestamp != nil {
			return nil, false, nil
		}
		return s.podVolume(pod, dir), true, nil
	}
	rest, ok := strings.CutPrefix(handle, holderHandlePrefix)
	holder, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || holder != s.holder || name == "" || strings.Contains(name, "/") {
		return nil, false, nil
	}
	return s.lookupName(ctx, name)
}

func (s *volumeStore) lookupName(ctx context.Context, name string) (Volume, bool, error) {
	c, ok, err := s.holderShim(ctx)
	if !ok {
		return nil, false, err
	}
	m, found, err := s.readMeta(ctx, c, name)
	if s.holderLost(ctx, c, err) {
		return nil, false, nil
	}
	if !found {
		return nil, false, err
	}
	return s.holderVolume(name, m), true, nil
}

// holderMetas is a client of the running holder and every volume's meta (expired ones included);
// no client when there is no holder running or it is lost with its node (holderlost.go).
func (s *volumeStore) holderMetas(ctx context.Context) (*shim.Client, map[string]holderMeta, error) {
	c, ok, err := s.holderShim(ctx)
	if !ok {
		return nil, nil, err
	}
	all, err := s.listMeta(ctx, c)
	if s.holderLost(ctx, c, err) {
		return nil, nil, nil
	}
	return c, all, err
}

// gc removes the holder's volumes whose handles are not in desired, and expired ones, but never the
// image copy of a container whose pod exists; it returns their handles. Step pods' directories are not its business (they go with their pods).
func (s *volumeStore) gc(ctx context.Context, desired []string) ([]string, error) {
	c, all, err := s.holderMetas(ctx)
	if c == nil || err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, h := range desired {
		want[h] = true
	}
	var removed []string
	for name, m := range all {
		handle := holderHandlePrefix + s.holder + "/" + name
		if want[handle] && (m.Expires == nil || time.Now().Before(*m.Expires)) {
			continue
		}
		if m.Container != "" && s.pods.Get(m.Container) != nil {
			continue // the image of a pod that lives, which its kubelet may pull again
		}
		if err := s.removeVolume(ctx, c, name); err != nil {
			return removed, fmt.Errorf("atcruntime: removing volume %s: %w", handle, err)
		}
		removed = append(removed, handle)
	}
	return removed, nil
}

// LookupVolume is the volume of handle ("pod/..." or "holder/..."), found false when it is gone.
func (w *Worker) LookupVolume(ctx context.Context, handle string) (Volume, bool, error) {
	return w.vols.lookup(ctx, handle)
}

// LookupResourceCache is the resource cache key, found false when the holder does not have it.
func (w *Worker) LookupResourceCache(ctx context.Context, key string) (Volume, bool, error) {
	return w.vols.lookupName(ctx, volumeName("resource", key))
}

// CreateVolumeForArtifact is an empty volume of the holder for teamID (`fly execute -i` uploads
// stream into it), kept until GCVolumes no longer desires it.
func (w *Worker) CreateVolumeForArtifact(ctx context.Context, teamID int) (Volume, error) {
	return w.vols.createArtifactVolume(ctx, teamID, "")
}

// GCVolumes removes the holder's volumes whose handles are not in desired (and expired task caches),
// apart from container GC, and returns the handles removed. The copy of an image artifact of another
// worker made for a container stays while the container's pod exists, desired or not.
func (w *Worker) GCVolumes(ctx context.Context, desired []string) ([]string, error) {
	return w.vols.gc(ctx, desired)
}

// TaskCacheHandle is the handle of the task cache of (jobID, stepName, path), whether or not it
// exists: what GCVolumes must be given to keep it.
func (w *Worker) TaskCacheHandle(jobID int, stepName, path string) string {
	key := TaskCacheKey{JobID: jobID, StepName: stepName, Path: path}.String()
	return holderHandlePrefix + w.vols.holder + "/" + volumeName("task", key)
}

// HolderPod is the name of the worker's holder pod, which container GC must keep.
func (w *Worker) HolderPod() string { return w.vols.HolderPod() }
