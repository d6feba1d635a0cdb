// What a build's volumes must meet, the atc way only, after the builds: container GC between
// builds (the get pods go, their resource caches kept in place are moved into the holder first and
// found after), one get feeding ten tasks at once, a second worker of the cluster (its own name and
// key) taking the source pod to pod from the first and the image copied into its holder, that copy
// kept by volume GC while its container lives, and the first worker's holder deleted (its volumes
// reported missing, the next task runs with an empty cache, never a failure).

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"stepshim.dev/go/atcruntime"
	"stepshim.dev/go/k8s"
)

// fanOut is how many tasks take the get's output at once.
const fanOut = 10

// countScript prints how many source files the task sees and whether it runs in the get's image.
const countScript = `set -e; cd "$1"; echo "files: $(find source/src -type f | wc -l)"
if [ -f ` + markerPath + ` ]; then echo "image: get"; else echo "image: step"; fi`

// streamEvents records what FindOrCreateContainer tells its delegate.
type streamEvents struct {
	mu  sync.Mutex
	all []string
}

func (e *streamEvents) StreamingVolume(v, from, to string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, "streaming "+v+" from "+from+" to "+to)
}

func (e *streamEvents) WaitingForStreamedVolume(v, to string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, "waiting for "+v+" on "+to)
}

func (a *atcWay) volumeChecks() []fault {
	return []fault{
		{"container GC between builds, resource caches kept", a.gcBetweenBuilds},
		{"one get feeding " + strconv.Itoa(fanOut) + " tasks at once", a.fanOutTasks},
		{"a second worker: P2P input, the image copy kept by GC", a.secondWorker},
		{"the holder deleted: volumes missing, the task cold", a.holderLost},
		{"a holder on a claim deleted: its task cache kept", a.claimedHolder},
	}
}

// gcBetweenBuilds collects every container of the builds, as ATC does once they are finished; both
// resource caches, kept in place in their get pods, are found after.
func (a *atcWay) gcBetweenBuilds(ctx context.Context) error {
	gone, err := a.w.GCContainers(ctx, nil, 0)
	if err != nil {
		return err
	}
	for _, h := range gone {
		if err := a.kit.WaitGone(ctx, h); err != nil {
			return err
		}
	}
	for _, res := range []resource{sourceRes, imageRes} {
		v, found, err := a.w.LookupResourceCache(ctx, a.keys[res])
		if err != nil || !found {
			return fmt.Errorf("the resource cache of %s after container GC: found %v, %v", res, found, err)
		}
		a.setOutput(res, v)
	}
	a.logf("container GC deleted %d pods; both resource caches found in the holder", len(gone))
	return nil
}

// fanOutTasks runs fanOut task containers at once, each with the source's resource cache as input.
func (a *atcWay) fanOutTasks(ctx context.Context) error {
	outs := make([]string, fanOut)
	errs := make([]error, fanOut)
	var wg sync.WaitGroup
	for i := range fanOut {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := a.container(ctx, "fan-"+strconv.Itoa(i), a.countSpec(a.source, nil))
			if err == nil {
				outs[i], err = runScript(ctx, c, countScript, taskDir)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
		if outs[i] != outs[0] || !strings.HasPrefix(outs[i], "files: ") || strings.HasPrefix(outs[i], "files: 0\n") {
			return fmt.Errorf("task %d printed %q, task 0 %q", i, outs[i], outs[0])
		}
	}
	return nil
}

// countSpec is a task container taking src at source/, in image when set, else the step image.
func (a *atcWay) countSpec(src atcruntime.Artifact, image atcruntime.Artifact) atcruntime.ContainerSpec {
	spec := atcruntime.ContainerSpec{Type: "task", StepName: "count", Dir: taskDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage},
		Inputs:    []atcruntime.Input{{Artifact: src, DestinationPath: "source"}}}
	if image != nil {
		spec.ImageSpec = atcruntime.ImageSpec{ImageArtifact: image}
	}
	return spec
}

// secondWorker: worker B of the same cluster, with its own name, key and holder, runs a task whose
// input is A's source cache (pod to pod: a few kilobytes to B's shims, where a stream through this
// process would write a tar of at least a 512-byte header per file) in A's image (copied into B's
// holder, kept by B's volume GC while the task's pod lives, collected after).
func (a *atcWay) secondWorker(ctx context.Context) error {
	toB := &wireCount{}
	b, kitB, closeB, err := a.peerWorker(ctx, toB, "b", atcruntime.HolderClaim{})
	if err != nil {
		return err
	}
	defer closeB()
	ev := &streamEvents{}
	handle := a.prefix + "b-task"
	c, _, err := b.FindOrCreateContainer(ctx, handle, a.countSpec(a.source, a.image), ev)
	if err != nil {
		return err
	}
	through := toB.Bytes()
	out, err := runScript(ctx, c, countScript, taskDir)
	if err != nil {
		return err
	}
	if !strings.Contains(out, "image: get") || strings.Contains(out, "files: 0\n") {
		return fmt.Errorf("worker B's task printed %q, want the source's files in the get's image", out)
	}
	files, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "files: ")))
	if through >= int64(512*files) {
		return fmt.Errorf("%d bytes went to B's shims to set up its task, not pod to pod (%d files)", through, files)
	}
	want := []string{"streaming for image from atc-build to atc-build-b", "streaming source from atc-build to atc-build-b"}
	if got := slices.Sorted(slices.Values(ev.all)); !slices.Equal(got, want) {
		return fmt.Errorf("the delegate heard %q, want %q", got, want)
	}
	a.logf("worker B: input and image from worker A with %d bytes to B's shims (%d files)", through, files)
	return a.imageCopyKept(ctx, b, kitB, handle)
}

// imageCopyKept: B's volume GC with an empty desired set keeps the image copy while the task's pod
// lives, and collects it once container GC has deleted the pod.
func (a *atcWay) imageCopyKept(ctx context.Context, b *atcruntime.Worker, kitB *k8s.Worker, handle string) error {
	kept, err := b.VolumeHandles(ctx)
	if err != nil || len(kept) != 1 {
		return fmt.Errorf("worker B's volumes: %v, %v; want the image copy", kept, err)
	}
	if removed, err := b.GCVolumes(ctx, nil); err != nil || len(removed) != 0 {
		return fmt.Errorf("volume GC while the task lives removed %v, %v", removed, err)
	}
	gone, err := b.GCContainers(ctx, nil, 0)
	if err != nil || !slices.Contains(gone, handle) {
		return fmt.Errorf("container GC of worker B: %v, %v", gone, err)
	}
	if err := kitB.WaitGone(ctx, handle); err != nil {
		return err
	}
	if removed, err := b.GCVolumes(ctx, nil); err != nil || !slices.Equal(removed, kept) {
		return fmt.Errorf("volume GC after the task: removed %v, %v; want %v", removed, err, kept)
	}
	return nil
}

// peerWorker is another worker beside A in A's Cluster: A's name and holder's with suffix, another
// key, its holder on claim if set, its shim connections counted by wire. The returned func deletes
// its pods and its holder's claim and stops its informer.
func (a *atcWay) peerWorker(ctx context.Context, wire *wireCount, suffix string, claim atcruntime.HolderClaim) (*atcruntime.Worker, *k8s.Worker, func(), error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	key, err := k8s.NewKey(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	kitCfg := a.kitConfig
	kitCfg.Worker, kitCfg.Key, kitCfg.DialShim = a.kitConfig.Worker+"-"+suffix, key, wire.Dial
	kit, err := k8s.NewWorker(ctx, a.cs, kitCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg := a.config
	cfg.Kit = kit
	cfg.Volumes.HolderName, cfg.Volumes.HolderClaim = a.prefix+"volumes-"+suffix, claim
	w, err := atcruntime.NewWorker(cfg)
	if err != nil {
		kit.Close()
		return nil, nil, nil, err
	}
	return w, kit, func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, p := range kit.List() {
			_ = kit.Delete(cctx, p.Name)
		}
		if claim.Size != "" {
			_ = kit.WaitGone(cctx, w.HolderPod())
			_ = kit.DeleteClaim(cctx, w.HolderPod())
		}
		kit.Close()
	}, nil
}

// holderLost: A's holder pod is deleted between builds: its volumes are reported missing, the
// resource caches are not found (the get would run again), and a task with a cache runs with an
// empty one.
func (a *atcWay) holderLost(ctx context.Context) error {
	holder := a.w.HolderPod()
	if err := a.kit.Delete(ctx, holder); err != nil {
		return err
	}
	if err := a.kit.WaitGone(ctx, holder); err != nil {
		return err
	}
	if handles, err := a.w.VolumeHandles(ctx); err != nil || len(handles) != 0 {
		return fmt.Errorf("volumes reported without the holder: %v, %v", handles, err)
	}
	if _, found, err := a.w.LookupResourceCache(ctx, a.keys[sourceRes]); found || err != nil {
		return fmt.Errorf("the source's cache without the holder: found %v, %v; want missing", found, err)
	}
	c, _, err := a.container(ctx, "cold", atcruntime.ContainerSpec{Type: "task", StepName: "task", Dir: taskDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}, Caches: []string{"cache"}})
	if err != nil {
		return err
	}
	out, err := runScript(ctx, c, `cd "$1"; if [ -f cache/stamp ]; then echo "cache: hit"; else echo "cache: miss"; fi`, taskDir)
	if err != nil || strings.TrimSpace(out) != "cache: miss" {
		return fmt.Errorf("the task after the holder's loss printed %q, %v; want an empty cache", out, err)
	}
	return nil
}

// claimedHolder: a worker whose holder keeps its volumes on a PersistentVolumeClaim (the cluster's
// default storage class): a task cache kept, the holder pod deleted, the next task finds the cache
// where a holder in its own file system restores an empty one (holderLost).
func (a *atcWay) claimedHolder(ctx context.Context) error {
	w, kit, closeW, err := a.peerWorker(ctx, &wireCount{}, "c", atcruntime.HolderClaim{Size: "64Mi"})
	if err != nil {
		return err
	}
	defer closeW()
	spec := atcruntime.ContainerSpec{Type: "task", StepName: "claimed", Dir: taskDir, TeamID: teamID, JobID: jobID,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}, Caches: []string{"cache"}}
	c, mounts, err := w.FindOrCreateContainer(ctx, a.prefix+"claim-1", spec, nil)
	if err != nil {
		return err
	}
	if _, err := runScript(ctx, c, `cd "$1"; echo kept > cache/stamp`, taskDir); err != nil {
		return err
	}
	for _, m := range mounts {
		if m.MountPath == taskDir+"/cache" {
			if err := m.Volume.(*atcruntime.PodVolume).InitializeTaskCache(ctx, jobID, "claimed", "cache", 0); err != nil {
				return err
			}
		}
	}
	if err := kit.Delete(ctx, w.HolderPod()); err != nil {
		return err
	}
	if err := kit.WaitGone(ctx, w.HolderPod()); err != nil {
		return err
	}
	c2, _, err := w.FindOrCreateContainer(ctx, a.prefix+"claim-2", spec, nil)
	if err != nil {
		return err
	}
	out, err := runScript(ctx, c2, `cd "$1"; cat cache/stamp 2>/dev/null || echo "no cache"`, taskDir)
	if err != nil || strings.TrimSpace(out) != "kept" {
		return fmt.Errorf("after the holder on a claim was deleted, the task printed %q, %v; want its cache", out, err)
	}
	return nil
}
