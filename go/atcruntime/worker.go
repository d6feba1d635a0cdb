// Worker: ATC's runtime Worker over a k8s.Worker (one informer on the worker's pods). Containers
// are step pods named by their handles, found or created declaratively: a pod of that name is found,
// not created again, and set up (inputs, caches, outputs) until its shim holds PropertyReady. The
// pod's life as the informer sees it ends the Waits of its processes (PodGoneError).

package atcruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"stepshim.dev/go/k8s"
)

// Config configures a Worker.
type Config struct {
	// Kit is the worker's pods: its informer, tokens and shim clients. Required.
	Kit *k8s.Worker
	// Template holds the pod settings every container shares: Delivery (required), NodeSelector,
	// Tolerations, ImagePullSecrets, ImagePullPolicy, ServiceAccount, and Env put before the
	// container's own. Its name, image and resources are set per container.
	Template k8s.StepSpec
	// ResourceTypes maps ATC's base resource types ("git", "registry-image", ...) to images.
	ResourceTypes map[string]string
	// ResourceTypeInfo holds what Info reports of a base resource type besides its image.
	ResourceTypeInfo map[string]ResourceTypeInfo
	// Platform, Team and Tags are what Info reports for ATC's registrar; Platform "" is "linux".
	Platform, Team string
	Tags           []string
	// CertsConfigMap is the ConfigMap of certificates mounted read-only at /etc/ssl/certs of the
	// containers whose spec asks for CertsBindMount; empty mounts nothing.
	CertsConfigMap string
	// Cluster, if set, holds the other workers of the cluster whose P2P URLs this worker's volumes
	// act on (and which act on this one's): pod to pod between workers (cluster.go). Nil: P2P
	// only within this worker; ATC then streams through the web node between workers.
	Cluster *Cluster
	// IgnoreLocality places containers where the scheduler alone decides; by default a container
	// prefers the nodes its inputs, image and caches are on (locality.go; Template.PreferredNodes,
	// if set, takes precedence).
	IgnoreLocality bool
	// ViaProxy reaches the shims through the apiserver (k8s.Worker.ConnectViaProxy) instead of at
	// their pod IPs.
	ViaProxy bool
	// StopGrace is how long a process has, after the TERM of a cancelled Process.Wait, to exit with
	// its output still flowing before KILL; also how long Wait then waits for the exit. Zero means
	// 10 s, as Garden.
	StopGrace time.Duration
	// RequestTimeout bounds the requests of the methods whose signatures carry no ctx (Properties,
	// SetProperty, SetTTY) and the clean-up requests of Wait (signals, deletes), retries included.
	// Zero means 30 s.
	RequestTimeout time.Duration
	// Volumes configures the volumes (holder pods, caches).
	Volumes VolumeConfig
	// FullReplay are the process ids whose stdout an Attach replays from the first byte, their
	// stderr continued where it was delivered (delivered.go). Nil means ResourceProcessID, ATC's
	// resource scripts, whose answer is their whole stdout; an empty slice means none.
	FullReplay []string
	// Streamer copies inputs (and image artifacts) of other workers into this worker's containers;
	// ATC passes its own. Nil is NewStreamer(StreamerConfig{Compression: Raw, P2P: true}).
	Streamer Streamer
	// ParallelInputs is how many inputs of one container are copied at once; zero means 4 (a
	// step pod's shim runs up to STEPSHIM_MAX_PULLS, 8, pulls at once).
	ParallelInputs int
	// NodeLostAfter is how long the shim of a process being waited for may answer nothing (not
	// even the output stream's keepalive, every 10 s) before the node counts as lost: Wait fails
	// with a *PodGoneError of reason ReasonNodeLost naming the node, and the pod is deleted at once
	// (lost.go). Zero means 20 s.
	NodeLostAfter time.Duration
	// DeliveredInterval is the least time between two records of how far a named process's output
	// has been written (one property request each); what a web node that dies without a word wrote
	// in the last interval is written again by the next Attach. Zero means 100 ms.
	DeliveredInterval time.Duration
}

func (c *Config) deliveredInterval() time.Duration {
	if c.DeliveredInterval <= 0 {
		return 100 * time.Millisecond
	}
	return c.DeliveredInterval
}

func (c *Config) streamer() Streamer {
	if c.Streamer == nil {
		return NewStreamer(StreamerConfig{Compression: Raw, P2P: true, Logf: c.Volumes.Logf})
	}
	return c.Streamer
}

func (c *Config) parallelInputs() int {
	if c.ParallelInputs <= 0 {
		return 4
	}
	return c.ParallelInputs
}

func (c *Config) stopGrace() time.Duration {
	if c.StopGrace <= 0 {
		return 10 * time.Second
	}
	return c.StopGrace
}

func (c *Config) requestTimeout() time.Duration {
	if c.RequestTimeout <= 0 {
		return 30 * time.Second
	}
	return c.RequestTimeout
}

// Worker is ATC's runtime Worker on one k8s.Worker. Methods are safe for concurrent use.
type Worker struct {
	kit  *k8s.Worker
	cfg  *Config
	vols *volumeStore
	// inflight is the resource caches being streamed into this worker (inputs.go).
	inflight inflight
}

// NewWorker returns the Worker of cfg.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.Kit == nil {
		return nil, errors.New("atcruntime: Config.Kit is required")
	}
	probe := cfg.Template
	probe.Name, probe.Image = "probe", "probe"
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("atcruntime: Config.Template: %w", err)
	}
	c := cfg
	return &Worker{kit: cfg.Kit, cfg: &c, vols: newVolumeStore(cfg.Kit, c)}, nil
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.kit.Name() }

// FindOrCreateContainer makes sure the step pod handle exists as spec says and returns it with its
// mounts, each a PodVolume of the pod, in Garden's order: ScratchPath, spec.Dir when no other mount
// is there (a get step reads its result from the volume at Dir), then the inputs, caches and outputs
// by path. A pod of that name is found, not created again. Until the pod's shim holds
// PropertyReady the set-up runs: output and cache directories created owned by spec.User, inputs
// copied in (Config.ParallelInputs at once; those of other workers through Config.Streamer, each
// told to delegate first, which may be nil), task caches restored. spec is not compared with a pod
// found. A pod that will never be ready is a *k8s.PodFailedError; one that is ending a
// *PodGoneError; ctx ending first a *k8s.NotReadyError.
func (w *Worker) FindOrCreateContainer(ctx context.Context, handle string, spec ContainerSpec, delegate BuildStepDelegate) (*Container, []VolumeMount, error) {
	if delegate == nil {
		delegate = quietDelegate{}
	}
	if w.kit.Get(handle) == nil {
		if err := w.create(ctx, handle, spec, delegate); err != nil {
			return nil, nil, err
		}
	}
	if _, err := w.kit.WaitReady(ctx, handle); err != nil {
		return nil, nil, err
	}
	c, err := w.container(ctx, handle)
	if err != nil {
		return nil, nil, err
	}
	c.user, c.dir = spec.User, spec.Dir
	paths, err := mountPaths(spec)
	if err != nil {
		return nil, nil, err
	}
	props, err := c.allProperties()
	if err != nil {
		return nil, nil, err
	}
	if props[PropertyReady] == "" {
		if err := w.setUp(ctx, c, spec, paths, delegate); err != nil {
			return nil, nil, fmt.Errorf("atcruntime: setting up %s: %w", handle, err)
		}
	}
	mounts := make([]VolumeMount, len(paths.all))
	for i, p := range paths.all {
		mounts[i] = VolumeMount{Volume: w.vols.podVolume(handle, p), MountPath: p}
	}
	return c, mounts, nil
}

// create creates the pod of spec; a pod of that name created meanwhile is taken as done.
func (w *Worker) create(ctx context.Context, handle string, spec ContainerSpec, delegate BuildStepDelegate) error {
	image, err := imageRef(w.cfg, spec.ImageSpec)
	if err != nil {
		return err
	}
	var from *k8s.ImageFrom
	if spec.ImageSpec.ImageArtifact != nil {
		if from, err = w.imageFrom(ctx, handle, spec.ImageSpec.ImageArtifact, spec.TeamID, delegate); err != nil {
			return fmt.Errorf("atcruntime: image of %s: %w", handle, err)
		}
	}
	s, err := stepSpec(w.cfg, handle, spec, image, from)
	if err != nil {
		return err
	}
	if !w.cfg.IgnoreLocality && len(s.PreferredNodes) == 0 {
		s.PreferredNodes, s.PreferredWeights = w.nearData(ctx, spec, from)
	}
	// A pod returned with an error is usable (an owner reference that could not be set; GC
	// collects what it would have).
	if pod, err := w.kit.Create(ctx, s); err != nil && pod == nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("atcruntime: creating %s: %w", handle, err)
	}
	return nil
}

// imageFrom is an image artifact as a directory of a pod of this worker: the artifact itself when it
// is a volume of this worker (or a resource cache this worker holds too), else a copy in a new
// artifact volume of the holder, kept while the container's pod exists (GCVolumes keeps it
// whatever ATC's desired set says: the kubelet pulls it as the pod starts).
func (w *Worker) imageFrom(ctx context.Context, handle string, art Artifact, teamID int, delegate BuildStepDelegate) (*k8s.ImageFrom, error) {
	if v, ok := w.vols.localVolume(art); ok {
		return &k8s.ImageFrom{Pod: v.Pod(), Path: v.Path()}, nil
	}
	if key, ok := resourceCacheKey(art); ok {
		if v, found, err := w.vols.lookupName(ctx, volumeName("resource", key)); err == nil && found {
			pv := v.(*HolderVolume)
			return &k8s.ImageFrom{Pod: pv.Pod(), Path: pv.Path()}, nil
		}
	}
	v, err := w.vols.createArtifactVolume(ctx, teamID, handle)
	if err != nil {
		return nil, fmt.Errorf("artifact %s is not on this worker, and no volume to copy it to: %w", art.Handle(), err)
	}
	delegate.StreamingVolume("for image", art.Source(), w.Name())
	if err := w.cfg.streamer().Stream(ctx, art, v.PodVolume); err != nil {
		return nil, fmt.Errorf("copying artifact %s: %w", art.Handle(), err)
	}
	return &k8s.ImageFrom{Pod: v.Pod(), Path: v.Path()}, nil
}

// ScratchPath is the empty directory every container gets, as Garden mounts a scratch volume.
const ScratchPath = "/scratch"

// paths are a spec's mount paths, absolute and clean: the scratch directory, the working directory
// when no input, cache or output is there, the inputs, the caches, the outputs (by name; one at an
// input's path is that input, as in Garden), and all of them in Garden's order: scratch, working
// directory, then the others by path.
type paths struct {
	workdir                      string
	inputs, caches, outputs, all []string
}

func mountPaths(spec ContainerSpec) (paths, error) {
	var p paths
	for _, in := range spec.Inputs {
		abs, err := containerPath(spec.Dir, in.DestinationPath)
		if err != nil {
			return p, err
		}
		p.inputs = append(p.inputs, abs)
	}
	for _, cache := range spec.Caches {
		abs, err := containerPath(spec.Dir, cache)
		if err != nil {
			return p, err
		}
		p.caches = append(p.caches, abs)
	}
	names := make([]string, 0, len(spec.Outputs))
	for name := range spec.Outputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		abs, err := containerPath(spec.Dir, spec.Outputs[name])
		if err != nil {
			return p, err
		}
		if !slices.Contains(p.inputs, abs) {
			p.outputs = append(p.outputs, abs)
		}
	}
	io := slices.Concat(p.inputs, p.caches, p.outputs)
	slices.Sort(io)
	io = slices.Compact(io)
	p.all = []string{ScratchPath}
	if spec.Dir != "" {
		dir, err := containerPath("/", spec.Dir)
		if err != nil {
			return p, err
		}
		if !slices.Contains(io, dir) && dir != ScratchPath {
			p.workdir = dir
			p.all = append(p.all, dir)
		}
	}
	p.all = append(p.all, slices.DeleteFunc(io, func(d string) bool { return d == ScratchPath })...)
	return p, nil
}

// setUp records the process defaults, creates the scratch, working, output and cache directories
// owned by the step user, streams the inputs in, restores the caches, and marks the pod ready.
func (w *Worker) setUp(ctx context.Context, c *Container, spec ContainerSpec, p paths, delegate BuildStepDelegate) error {
	for name, value := range map[string]string{PropertyUser: spec.User, PropertyDir: spec.Dir} {
		if value != "" {
			if err := c.SetProperty(name, value); err != nil {
				return err
			}
		}
	}
	owner, err := resolveOwner(ctx, c.client, spec.User)
	var unknown *UnknownUserError
	if errors.As(err, &unknown) {
		// As Garden: the container goes on with the owners as they are, and says why.
		unknown.User = spec.User
		w.vols.logf("atcruntime: %s: %v; the volumes keep their owners", c.handle, unknown)
		owner, err = nil, nil
	}
	if err != nil {
		return err
	}
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		return err
	}
	made := slices.Concat([]string{ScratchPath}, p.outputs, p.caches)
	if p.workdir != "" {
		made = append(made, p.workdir)
	}
	for _, dir := range made {
		err := retry(ctx, func() error {
			return c.client.PutFilesAs(ctx, dir, owner, bytes.NewReader(empty.Bytes()))
		})
		if err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	err = parallel(ctx, len(spec.Inputs), w.cfg.parallelInputs(), func(ctx context.Context, i int) error {
		dst := w.vols.podVolume(c.handle, p.inputs[i])
		dst.owner = owner
		if err := w.fetchInput(ctx, dst, spec.Inputs[i].Artifact, delegate); err != nil {
			return fmt.Errorf("input at %s: %w", p.inputs[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, cache := range spec.Caches {
		key := TaskCacheKey{JobID: spec.JobID, StepName: spec.StepName, Path: cache}
		if err := w.vols.restoreTaskCache(ctx, w.vols.podVolume(c.handle, p.caches[i]), key, owner); err != nil {
			return fmt.Errorf("cache at %s: %w", p.caches[i], err)
		}
	}
	return c.SetProperty(PropertyReady, "1")
}

// LookupContainer finds the container handle: found is false when the worker has no such pod or
// the pod is ending.
func (w *Worker) LookupContainer(ctx context.Context, handle string) (*Container, bool, error) {
	pod := w.kit.Get(handle)
	if pod == nil || podGone(pod, handle, pod.UID) != nil {
		return nil, false, nil
	}
	c, err := w.container(ctx, handle)
	if err != nil {
		return nil, false, err
	}
	props, err := c.allProperties()
	if err != nil {
		return nil, false, err
	}
	c.user, c.dir = props[PropertyUser], props[PropertyDir]
	return c, true, nil
}

// container connects to the shim of the ready pod handle.
func (w *Worker) container(ctx context.Context, handle string) (*Container, error) {
	pod := w.kit.Get(handle)
	if pod == nil {
		return nil, &PodGoneError{Pod: handle, Reason: "Deleted", Message: "the pod is gone"}
	}
	watch := &podState{kit: w.kit, name: handle, uid: pod.UID}
	if gone := watch.gone(); gone != nil {
		return nil, gone
	}
	connect := w.kit.Connect
	if w.cfg.ViaProxy {
		connect = w.kit.ConnectViaProxy
	}
	client, err := connect(ctx, handle)
	if err != nil {
		return nil, err
	}
	return &Container{handle: handle, client: client, pod: watch, cfg: w.cfg, node: pod.Spec.NodeName,
		contact: w.kit.Contact(handle), deleteNow: func(ctx context.Context) error { return w.kit.DeleteNow(ctx, handle) }}, nil
}

// podState is a pod's life as the worker's informer sees it.
type podState struct {
	kit  *k8s.Worker
	name string
	uid  types.UID
}

func (s *podState) watch() (<-chan struct{}, *PodGoneError) {
	changed := s.kit.Changes()
	return changed, s.gone()
}

func (s *podState) gone() *PodGoneError {
	pod := s.kit.Get(s.name)
	if pod == nil {
		// Deleted: its last state says why, if it was evicted before it went.
		if last := s.kit.Departed(s.name); last != nil && (s.uid == "" || last.UID == s.uid) {
			if g := podGone(last, s.name, s.uid); g != nil && g.Reason != "Deleted" {
				return g
			}
		}
	}
	return podGone(pod, s.name, s.uid)
}

// podGone says why the pod name of uid has ended or is ending, or nil while it lives: gone from the
// cache, replaced by a pod of another uid, being deleted (with the DisruptionTarget condition's
// reason when Kubernetes gave one: eviction, taint manager, preemption), or failed (Evicted, a dead
// shim, ... as k8s.ProgressOf reads it).
func podGone(pod *corev1.Pod, name string, uid types.UID) *PodGoneError {
	switch {
	case pod == nil:
		return &PodGoneError{Pod: name, Reason: "Deleted", Message: "the pod is gone"}
	case uid != "" && pod.UID != uid:
		return &PodGoneError{Pod: name, Reason: "Replaced", Message: "the pod was deleted and another of its name created"}
	case pod.DeletionTimestamp != nil:
		e := &PodGoneError{Pod: name, Reason: "Deleted", Message: "the pod is being deleted"}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				e.Reason, e.Message = c.Reason, c.Message
			}
		}
		return e
	}
	if p := k8s.ProgressOf(pod); p.Stage == k8s.Failed {
		return &PodGoneError{Pod: name, Reason: p.Reason, Message: p.Detail}
	}
	return nil
}

// GCContainers deletes the worker's step pods whose handles are not in desired and that are at least
// grace old (k8s.Worker.GC, with the Secrets and policies of pods gone), never the holder pod that
// keeps the worker's volumes: those go by GCVolumes, apart from containers. A resource cache kept
// in place in a pod about to go is first moved into the holder; a pod whose move fails stays.
func (w *Worker) GCContainers(ctx context.Context, desired []string, grace time.Duration) ([]string, error) {
	keep := append(append([]string(nil), desired...), w.HolderPod())
	keep = append(keep, w.vols.moveOut(ctx, w.kit.List(), keep, grace)...)
	return w.kit.GC(ctx, keep, grace)
}
