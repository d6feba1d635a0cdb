// The atc way: the builds through the package atcruntime only, as ATC's exec steps would drive
// them. Containers come from Worker.FindOrCreateContainer with ATC's ContainerSpec (each get's
// output, the task's input, cache and output as mounts); processes are Container.Run and
// Process.Wait; each get's output is kept as a resource cache (InitializeResourceCache), which the
// second build finds (LookupResourceCache) and uses as the step's output without a get container;
// the task's image is the image get's volume (ImageSpec.ImageArtifact: the kubelet pulls it from the
// get's pod, or from the holder pod in build 2, through the node-local forwarder); inputs go pod to
// pod; the task's cache is kept by InitializeTaskCache after each run and restored into the next
// run's container. The worker's credentials are stepctl manifests' RBAC: no pods/exec.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"stepshim.dev/go/atcruntime"
	"stepshim.dev/go/k8s"
)

// Who the build belongs to, as ATC's database would say.
const (
	teamID = 1
	jobID  = 1
)

// atcWay runs the build on one atcruntime.Worker.
type atcWay struct {
	kit *k8s.Worker
	w   *atcruntime.Worker
	// cs, kitConfig and config make another Worker on the same pods (a restarted web node); evictor
	// may evict pods (the cluster's operator, not the worker).
	cs        kubernetes.Interface
	kitConfig k8s.Config
	config    atcruntime.Config
	evictor   kubernetes.Interface
	stepImage string
	prefix    string
	handles   []string
	check     *atcruntime.Container
	// source and image are the gets' outputs, keys their resource caches' keys; out is the last task
	// run's output, run its number.
	source, image, out atcruntime.Volume
	keys               map[resource]string
	run                int
	// wire counts the bytes to and from the apiserver and the shims.
	wire *wireCount
	// placement logs each container's node.
	placement bool
}

func newAtcWay(ctx context.Context, o options, prefix string) (*atcWay, string, error) {
	wire := &wireCount{}
	cs, err := countedClientset(o.kubeconfig, wire)
	if err != nil {
		return nil, "", err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return nil, "", err
	}
	key, err := k8s.KeyFromFile(o.keyFile)
	if err != nil {
		return nil, "", err
	}
	kitConfig := k8s.Config{Namespace: o.namespace, Worker: "atc-build", Key: key, DialShim: wire.Dial}
	kit, err := k8s.NewWorker(ctx, cs, kitConfig)
	if err != nil {
		return nil, "", err
	}
	delivery, err := k8s.InitContainer(o.shimImage).WithTLS(k8s.TLSMode(o.tlsMode))
	if o.shimConfigMap != "" {
		delivery = k8s.FromConfigMap(o.shimConfigMap)
	}
	if err != nil {
		kit.Close()
		return nil, "", err
	}
	config := atcruntime.Config{
		Template:       k8s.StepSpec{Delivery: delivery},
		Cluster:        atcruntime.NewCluster(),
		IgnoreLocality: o.ignoreLocality,
		Volumes: atcruntime.VolumeConfig{Holder: k8s.StepSpec{Image: o.shimImage, Delivery: delivery},
			HolderName: prefix + "volumes"},
	}
	withKit := config
	withKit.Kit = kit
	w, err := atcruntime.NewWorker(withKit)
	if err != nil {
		kit.Close()
		return nil, "", err
	}
	a := &atcWay{kit: kit, w: w, cs: cs, kitConfig: kitConfig, config: config, stepImage: o.stepImage, prefix: prefix,
		keys: map[resource]string{}, wire: wire, placement: o.placement}
	if o.evictKubeconfig != "" {
		if a.evictor, err = k8s.Clientset(o.evictKubeconfig); err != nil {
			kit.Close()
			return nil, "", err
		}
	}
	return a, v.GitVersion, nil
}

func (a *atcWay) Name() string { return "atc" }

func (a *atcWay) Note() string {
	return "atcruntime only: step pods with the shim as PID 1, processes through the shims, the task " +
		"in the image get's volume (pulled by the kubelet from the get's or the holder's pod through the " +
		"forwarder), inputs pod to pod, the task cache and the resource caches kept by the holder pod"
}

func (a *atcWay) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "atc-build: "+format+"\n", args...)
}

// Close stops the kit's informer and the counting relay.
func (a *atcWay) Close() {
	a.kit.Close()
	a.wire.Close()
}

// Bytes is every byte to and from the apiserver and the shims; the way carries no artifact itself.
func (a *atcWay) Bytes() (wire, artifacts int64) { return a.wire.Bytes(), -1 }

// container is FindOrCreateContainer for step with spec, its mounts by path.
func (a *atcWay) container(ctx context.Context, step string, spec atcruntime.ContainerSpec) (*atcruntime.Container, map[string]atcruntime.Volume, error) {
	spec.TeamID, spec.TeamName, spec.JobID, spec.Build = teamID, "main", jobID, a.prefix+"job"
	handle := a.prefix + step
	a.handles = append(a.handles, handle)
	c, mounts, err := a.w.FindOrCreateContainer(ctx, handle, spec, nil)
	if err != nil {
		return nil, nil, err
	}
	if p := a.kit.Get(handle); a.placement && p != nil {
		a.logf("placed %s on %s", step, p.Spec.NodeName)
	}
	byPath := map[string]atcruntime.Volume{}
	for _, m := range mounts {
		byPath[m.MountPath] = m.Volume
	}
	return c, byPath, nil
}

// runScript runs a sh script in c with args and request on stdin, returning its stdout; a non-zero exit
// is an error with its stderr.
func runScript(ctx context.Context, c *atcruntime.Container, script string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	p, err := c.Run(ctx, atcruntime.ProcessSpec{Path: "/bin/sh", Args: append([]string{"-c", script, "sh"}, args...)},
		atcruntime.ProcessIO{Stdin: strings.NewReader(request), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return "", err
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return "", err
	}
	if res.ExitStatus != 0 {
		return "", fmt.Errorf("exited %d%s in %s: %s", res.ExitStatus, signal(res), c.Handle(),
			strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func signal(r atcruntime.ProcessResult) string {
	if r.Signal == "" {
		return ""
	}
	return " (" + r.Signal + ")"
}

func (a *atcWay) CheckContainer(ctx context.Context) (time.Duration, error) {
	t := time.Now()
	c, _, err := a.container(ctx, "check", atcruntime.ContainerSpec{Type: "check", Dir: checkDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}})
	a.check = c
	return time.Since(t), err
}

func (a *atcWay) Check(ctx context.Context, n int) (string, error) {
	return runScript(ctx, a.check, checkScript, strconv.Itoa(n))
}

// Get runs the get of res in a container of its own, then keeps its output as the resource cache of
// the version it printed (InitializeResourceCache, timed as After).
func (a *atcWay) Get(ctx context.Context, res resource, b Build) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	dir, name := getDir, string(res)
	if res == imageRes {
		dir = getImageDir
	}
	// As ATC's get step: only Dir, and the resource's volume is the one mounted there.
	c, vols, err := a.container(ctx, "get-"+name, atcruntime.ContainerSpec{Type: "get", StepName: "get-" + name,
		Dir: dir, ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}})
	if err != nil {
		return "", st, err
	}
	st.Setup, t = time.Since(t), time.Now()
	script, args := getSourceScript, []string{dir, strconv.Itoa(b.Files)}
	if res == imageRes {
		script, args = getImageScript, []string{dir}
	}
	out, err := runScript(ctx, c, script, args...)
	st.Run, t = time.Since(t), time.Now()
	if err != nil {
		return out, st, err
	}
	vol, ok := vols[dir].(*atcruntime.PodVolume)
	if !ok {
		return out, st, fmt.Errorf("the get of %s has no pod volume at its Dir %s", name, dir)
	}
	a.setOutput(res, vol)
	a.keys[res] = a.prefix + name + "@" + strings.TrimSpace(out)
	if _, err := vol.InitializeResourceCache(ctx, a.keys[res]); err != nil {
		return out, st, fmt.Errorf("keeping the resource cache: %w", err)
	}
	st.After = time.Since(t)
	return out, st, nil
}

func (a *atcWay) setOutput(res resource, v atcruntime.Volume) {
	if res == imageRes {
		a.image = v
	} else {
		a.source = v
	}
}

// Cached finds res's resource cache at the version build 1 got (LookupResourceCache) and takes it as
// the get's output.
func (a *atcWay) Cached(ctx context.Context, res resource) (stepTime, error) {
	t := time.Now()
	v, found, err := a.w.LookupResourceCache(ctx, a.keys[res])
	if err != nil {
		return stepTime{}, err
	}
	if !found {
		return stepTime{}, fmt.Errorf("no resource cache %q", a.keys[res])
	}
	a.setOutput(res, v)
	return stepTime{Setup: time.Since(t)}, nil
}

// Task runs in the get's image with its source as input, a task cache and an output; after the
// run the cache is kept for the next (InitializeTaskCache, timed as After).
func (a *atcWay) Task(ctx context.Context, runNo int) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	a.run = runNo
	c, vols, err := a.container(ctx, "task-"+strconv.Itoa(runNo), atcruntime.ContainerSpec{
		Type: "task", StepName: "task", Dir: taskDir,
		ImageSpec: atcruntime.ImageSpec{ImageArtifact: a.image},
		Inputs:    []atcruntime.Input{{Artifact: a.source, DestinationPath: "source"}},
		Caches:    []string{"cache"},
		Outputs:   map[string]string{"out": "out"}})
	if err != nil {
		return "", st, err
	}
	a.out = vols[taskDir+"/out"]
	st.Setup, t = time.Since(t), time.Now()
	out, err := runScript(ctx, c, taskScript, taskDir, "", strconv.Itoa(runNo))
	st.Run, t = time.Since(t), time.Now()
	if err != nil {
		return out, st, err
	}
	cache, ok := vols[taskDir+"/cache"].(*atcruntime.PodVolume)
	if !ok {
		return out, st, errors.New("the task's cache mount is not a pod volume")
	}
	if err := cache.InitializeTaskCache(ctx, jobID, "task", "cache", 0); err != nil {
		return out, st, fmt.Errorf("keeping the task cache: %w", err)
	}
	st.After = time.Since(t)
	return out, st, nil
}

func (a *atcWay) Put(ctx context.Context) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	c, _, err := a.container(ctx, "put-"+strconv.Itoa(a.run), atcruntime.ContainerSpec{Type: "put", StepName: "put", Dir: putDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage},
		Inputs:    []atcruntime.Input{{Artifact: a.out, DestinationPath: "out"}}})
	if err != nil {
		return "", st, err
	}
	st.Setup, t = time.Since(t), time.Now()
	out, err := runScript(ctx, c, putScript, putDir)
	st.Run = time.Since(t)
	return out, st, err
}

// Cleanup deletes the build's pods and the holder, not waiting for them to go.
func (a *atcWay) Cleanup(ctx context.Context) error {
	var errs []error
	for _, h := range append(a.handles, a.w.HolderPod()) {
		if a.kit.Get(h) == nil {
			continue
		}
		if err := a.kit.Delete(ctx, h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
