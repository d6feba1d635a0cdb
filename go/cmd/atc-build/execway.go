// The exec way: the builds as an exec-based Kubernetes runtime runs them today. Every container is
// a pod of the step image running `sleep`; every process is a pods/exec through the apiserver
// (client-go's remotecommand: WebSocket, SPDY when the apiserver refuses the upgrade); every
// artifact is a tar stream through this process (`tar c` exec'd in the source pod piped into `tar x`
// exec'd in the destination). Without a registry no pod can run in an image another pod wrote, so
// the task runs in the step image with the image get's rootfs/ copied in as one more input. Such a
// runtime has no volumes apart from its pods, so what it keeps is pods: the task cache is the last
// run's cache/ streamed from its pod into the next run's, and a get's resource cache is the get's
// pod itself, kept running and streamed from again by the next build (a lookup of the pod, no get).

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// execWay runs the build in namespace ns with pods/exec rights.
type execWay struct {
	cs    kubernetes.Interface
	rest  *rest.Config
	ns    string
	image string
	// prefix starts the names of this run's pods.
	prefix string
	pods   []string
	// lastTask is the step of the last task run, whose output the put reads.
	lastTask string
	// streamed counts the bytes of the artifacts' tar streams through this process; wire all
	// bytes to and from the apiserver.
	streamed atomic.Int64
	wire     *wireCount
}

func newExecWay(cs kubernetes.Interface, cfg *rest.Config, wire *wireCount, ns, image, prefix string) *execWay {
	return &execWay{cs: cs, rest: cfg, wire: wire, ns: ns, image: image, prefix: prefix}
}

// Close stops the counting relay.
func (e *execWay) Close() { e.wire.Close() }

func (e *execWay) Name() string { return "exec" }

func (e *execWay) Note() string {
	return "sleep pods, every process a pods/exec through the apiserver, artifacts as tar streams " +
		"through the controller; the task runs in the step image with the image get's rootfs/ copied in " +
		"as an input (no pod can run in an image another pod wrote without a registry); the resource " +
		"caches are the get pods, kept running"
}

func (e *execWay) pod(step string) string { return e.prefix + step }

// start creates the sleep pod of step and waits until its container runs.
func (e *execWay) start(ctx context.Context, step string) error {
	name := e.pod(step)
	zero := int64(0)
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "atc-build-exec"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			Containers: []corev1.Container{{
				Name: "step", Image: e.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "86400"},
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	e.pods = append(e.pods, name)
	return e.waitRunning(ctx, name)
}

// waitRunning watches pod name until its container is ready; a pod that ends first is an error.
func (e *execWay) waitRunning(ctx context.Context, name string) error {
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		switch pod.Status.Phase {
		case corev1.PodFailed, corev1.PodSucceeded:
			return fmt.Errorf("pod %s ended: %s %s", name, pod.Status.Phase, pod.Status.Message)
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.Ready {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("pod %s not running: %w", name, ctx.Err())
	}
	return fmt.Errorf("pod %s: the watch ended before it ran", name)
}

// exec runs argv in step's pod through the apiserver; a non-zero exit is an error with stderr.
func (e *execWay) exec(ctx context.Context, step string, argv []string, stdin io.Reader, stdout io.Writer) error {
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.ns).Name(e.pod(step)).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: "step", Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.rest, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.rest, "POST", req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("%s in %s exited %d: %s", argv[0], e.pod(step), exit.ExitStatus(),
			strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return fmt.Errorf("exec %s in %s: %w", argv[0], e.pod(step), err)
	}
	return nil
}

// script runs a sh script in step's pod with args and request on stdin, returning its stdout.
func (e *execWay) script(ctx context.Context, step, script string, args ...string) (string, error) {
	var out bytes.Buffer
	argv := append([]string{"sh", "-c", script, step}, args...)
	err := e.exec(ctx, step, argv, strings.NewReader(request), &out)
	return out.String(), err
}

// stream copies srcDir of src's pod into dstDir of dst's pod: `tar c` out of one, through this
// process, into `tar x` in the other.
func (e *execWay) stream(ctx context.Context, src, srcDir, dst, dstDir string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := e.exec(ctx, src, []string{"tar", "cf", "-", "-C", srcDir, "."}, nil, &counter{w: w, n: &e.streamed})
		w.CloseWithError(err)
		done <- err
	}()
	errIn := e.exec(ctx, dst, []string{"sh", "-c", `mkdir -p "$1" && tar xf - -C "$1"`, "x", dstDir}, r, io.Discard)
	if errIn == nil {
		// tar x stops at the archive's end; what tar c still writes (its padding) is read and dropped.
		_, _ = io.Copy(io.Discard, r)
	} else {
		r.CloseWithError(errIn)
		cancel()
	}
	errOut := <-done
	switch {
	case errOut != nil && errIn != nil:
		return fmt.Errorf("streaming %s:%s into %s:%s: out: %v; in: %w", e.pod(src), srcDir, e.pod(dst), dstDir, errOut, errIn)
	case errOut != nil:
		return fmt.Errorf("streaming %s:%s out: %w", e.pod(src), srcDir, errOut)
	case errIn != nil:
		return fmt.Errorf("streaming into %s:%s: %w", e.pod(dst), dstDir, errIn)
	}
	return nil
}

// Bytes is every byte to and from the apiserver, and of those the artifacts' tar streams.
func (e *execWay) Bytes() (wire, artifacts int64) { return e.wire.Bytes(), e.streamed.Load() }

// counter counts what is written through it into n.
type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (e *execWay) CheckContainer(ctx context.Context) (time.Duration, error) {
	t := time.Now()
	err := e.start(ctx, "check")
	return time.Since(t), err
}

func (e *execWay) Check(ctx context.Context, n int) (string, error) {
	return e.script(ctx, "check", checkScript, strconv.Itoa(n))
}

// getDirs is where the get of res works and what of it later steps take.
func getDirs(res resource) (dir, artifact string) {
	if res == imageRes {
		return getImageDir, getImageDir + "/rootfs"
	}
	return getDir, getDir
}

func (e *execWay) Get(ctx context.Context, res resource, b Build) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	step := "get-" + string(res)
	dir, _ := getDirs(res)
	if err := e.start(ctx, step); err != nil {
		return "", st, err
	}
	if err := e.exec(ctx, step, []string{"mkdir", "-p", dir}, nil, io.Discard); err != nil {
		return "", st, err
	}
	st.Setup, t = time.Since(t), time.Now()
	script, args := getSourceScript, []string{dir, strconv.Itoa(b.Files)}
	if res == imageRes {
		script, args = getImageScript, []string{dir}
	}
	out, err := e.script(ctx, step, script, args...)
	st.Run = time.Since(t)
	return out, st, err
}

// Cached finds res's get pod of the last build still running: its directory is the artifact again.
func (e *execWay) Cached(ctx context.Context, res resource) (stepTime, error) {
	t := time.Now()
	name := e.pod("get-" + string(res))
	pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return stepTime{}, fmt.Errorf("the get pod %s: %w", name, err)
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return stepTime{}, fmt.Errorf("the get pod %s is %s, not running", name, pod.Status.Phase)
	}
	return stepTime{Setup: time.Since(t)}, nil
}

// Task's inputs: the source get's source/ and the image get's rootfs/, and from the second run on
// the last run's cache/; its output dir out/ and its cache dir made empty when there is none.
func (e *execWay) Task(ctx context.Context, run int) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	step := "task-" + strconv.Itoa(run)
	if err := e.start(ctx, step); err != nil {
		return "", st, err
	}
	for _, res := range []resource{sourceRes, imageRes} {
		_, from := getDirs(res)
		to := taskDir + "/source"
		if res == imageRes {
			to = taskDir + "/image/rootfs"
		}
		if err := e.stream(ctx, "get-"+string(res), from, step, to); err != nil {
			return "", st, err
		}
	}
	if e.lastTask != "" {
		if err := e.stream(ctx, e.lastTask, taskDir+"/cache", step, taskDir+"/cache"); err != nil {
			return "", st, err
		}
	}
	if err := e.exec(ctx, step, []string{"mkdir", "-p", taskDir + "/out", taskDir + "/cache"}, nil, io.Discard); err != nil {
		return "", st, err
	}
	e.lastTask = step
	st.Setup, t = time.Since(t), time.Now()
	out, err := e.script(ctx, step, taskScript, taskDir, taskDir+"/image/rootfs", strconv.Itoa(run))
	st.Run = time.Since(t)
	return out, st, err
}

func (e *execWay) Put(ctx context.Context) (string, stepTime, error) {
	var st stepTime
	t := time.Now()
	step := "put-" + strings.TrimPrefix(e.lastTask, "task-")
	if err := e.start(ctx, step); err != nil {
		return "", st, err
	}
	if err := e.stream(ctx, e.lastTask, taskDir+"/out", step, putDir+"/out"); err != nil {
		return "", st, err
	}
	st.Setup, t = time.Since(t), time.Now()
	out, err := e.script(ctx, step, putScript, putDir)
	st.Run = time.Since(t)
	return out, st, err
}

// Cleanup deletes the run's pods, not waiting for them to go.
func (e *execWay) Cleanup(ctx context.Context) error {
	var errs []error
	for _, p := range e.pods {
		err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, p, metav1.DeleteOptions{})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
