// The atc way: the build through the package atcruntime only, as ATC's exec steps would drive it.
// Containers come from Worker.FindOrCreateContainer with ATC's ContainerSpec (the get's outputs,
// the task's input, cache and output as mounts); processes are Container.Run and Process.Wait;
// the task's image is the get's image volume (ImageSpec.ImageArtifact: the kubelet pulls it from
// the get's pod through the node-local forwarder); inputs go pod to pod; the task's cache is kept
// by InitializeTaskCache after the first run and restored into the second run's container. The
// worker's credentials are stepctl manifests' RBAC: no pods/exec.

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

	"stepshim.dev/protocol/go/k8s"
	"stepshim.dev/protocol/go/k8s/atcruntime"
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
	// source and image are the get's outputs; out is the last task run's output.
	source, image, out atcruntime.Volume
}

func newAtcWay(ctx context.Context, o options, prefix string) (*atcWay, string, error) {
	cs, err := k8s.Clientset(o.kubeconfig)
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
	kitConfig := k8s.Config{Namespace: o.namespace, Worker: "atc-build", Key: key}
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
		Template: k8s.StepSpec{Delivery: delivery},
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
	a := &atcWay{kit: kit, w: w, cs: cs, kitConfig: kitConfig, config: config, stepImage: o.stepImage, prefix: prefix}
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
		"in the get's image (pulled by the kubelet from the get's pod through the forwarder), inputs " +
		"pod to pod, the task cache kept by the holder pod"
}

func (a *atcWay) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "atc-build: "+format+"\n", args...)
}

// Close stops the kit's informer.
func (a *atcWay) Close() { a.kit.Close() }

// container is FindOrCreateContainer for step with spec, its mounts by path.
func (a *atcWay) container(ctx context.Context, step string, spec atcruntime.ContainerSpec) (*atcruntime.Container, map[string]atcruntime.Volume, error) {
	spec.TeamID, spec.TeamName, spec.JobID = teamID, "main", jobID
	handle := a.prefix + step
	a.handles = append(a.handles, handle)
	c, mounts, err := a.w.FindOrCreateContainer(ctx, handle, spec)
	if err != nil {
		return nil, nil, err
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

func (a *atcWay) Get(ctx context.Context, b Build) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	c, vols, err := a.container(ctx, "get", atcruntime.ContainerSpec{Type: "get", StepName: "get", Dir: getDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage},
		Outputs:   map[string]string{"source": "source", "image": "image"}})
	if err != nil {
		return "", st, err
	}
	a.source, a.image = vols[getDir+"/source"], vols[getDir+"/image"]
	st.Setup, t = time.Since(t), time.Now()
	out, err := runScript(ctx, c, getScript, getDir, strconv.Itoa(b.Files))
	st.Run = time.Since(t)
	return out, st, err
}

// Task runs in the get's image with its source as input, a task cache and an output; after the
// run the cache is kept for the next (InitializeTaskCache, timed as After).
func (a *atcWay) Task(ctx context.Context, runNo int) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
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
	c, _, err := a.container(ctx, "put", atcruntime.ContainerSpec{Type: "put", StepName: "put", Dir: putDir,
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
