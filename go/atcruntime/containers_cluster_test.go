//go:build cluster

// Containers and processes of the ATC runtime on a real cluster, as a worker holding only the RBAC
// `stepctl manifests` prints: FindOrCreateContainer twice with one handle finds the one pod; the
// set-up put an input in place and made the output owned by the step user (a name resolved through
// the image's /etc/passwd), whom processes run as; Run's ctx ending leaves the process running; a
// step pod deleted in the middle of a Wait fails it at once with the pod's reason.
// tests/cluster/tests.d/86-atc-containers builds and runs it; each check prints one "ok:" line.

package atcruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/k8s"
)

func okc(format string, args ...any) { fmt.Printf("86-atc-containers: ok: "+format+"\n", args...) }

// tarArtifact is an artifact from outside the worker: a tar stream the caller has.
type tarArtifact struct{ files map[string]string }

func (a tarArtifact) StreamOut(_ context.Context, _ string, c Compression) (io.ReadCloser, error) {
	if c != Raw {
		return nil, fmt.Errorf("compression %s", c)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range a.files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

func (a tarArtifact) Handle() string { return "test-upload" }
func (a tarArtifact) Source() string { return "the test" }

func containersWorker(t *testing.T, ctx context.Context) (*Worker, *k8s.Worker, string) {
	for _, name := range []string{"STEPSHIM_KIT_KUBECONFIG", "STEPSHIM_KIT_NAMESPACE", "STEPSHIM_KIT_KEY",
		"STEPSHIM_KIT_STEP_IMAGE", "STEPSHIM_KIT_SHIM_IMAGE"} {
		if os.Getenv(name) == "" {
			t.Fatalf("the cluster test needs %s (tests/cluster/tests.d/86-atc-containers sets it)", name)
		}
	}
	cs, err := k8s.Clientset(os.Getenv("STEPSHIM_KIT_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := k8s.KeyFromFile(os.Getenv("STEPSHIM_KIT_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	kit, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: os.Getenv("STEPSHIM_KIT_NAMESPACE"), Worker: "atc-core", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kit.Close)
	delivery, err := k8s.InitContainer(os.Getenv("STEPSHIM_KIT_SHIM_IMAGE")).WithTLS(k8s.TLSMode(os.Getenv("STEPSHIM_KIT_TLS")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(Config{Kit: kit, Template: k8s.StepSpec{Delivery: delivery}, StopGrace: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return w, kit, os.Getenv("STEPSHIM_KIT_STEP_IMAGE")
}

func TestContainersCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	w, kit, image := containersWorker(t, ctx)
	spec := ContainerSpec{
		StepName: "unit", ImageSpec: ImageSpec{ImageURL: image}, Dir: "/tmp/build/x", User: "nobody",
		Env:     []string{"STEP=unit"},
		Inputs:  []Input{{Artifact: tarArtifact{map[string]string{"hello": "from the caller\n"}}, DestinationPath: "in"}},
		Outputs: map[string]string{"out": "out"},
	}
	start := time.Now()
	c, mounts, err := w.FindOrCreateContainer(ctx, "atc-core-task", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	uid := kit.Get("atc-core-task").UID
	okc("FindOrCreateContainer made pod %s and set it up in %v; mounts %s", c.Handle(), time.Since(start).Round(time.Millisecond), mountList(mounts))
	c2, mounts2, err := w.FindOrCreateContainer(ctx, "atc-core-task", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := kit.Get("atc-core-task").UID; got != uid || c2.Handle() != c.Handle() || mountList(mounts2) != mountList(mounts) {
		t.Fatalf("the second FindOrCreateContainer made pod %s (uid %s, first %s)", c2.Handle(), got, uid)
	}
	okc("the second FindOrCreateContainer with the same handle found the same pod (uid %s)", uid)

	var out shimtest.Buffer
	runCtx, stopRun := context.WithCancel(ctx)
	p, err := c2.Run(runCtx, ProcessSpec{Path: "sh", Args: []string{"-c",
		`sleep 1; id -u; stat -c %U:%u:%g out; stat -c %U in/hello; cat in/hello; echo $STEP; touch out/made in/made`}},
		ProcessIO{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	stopRun()
	res, err := p.Wait(ctx)
	want := "65534\nnobody:65534:65534\nnobody\nfrom the caller\nunit\n"
	if err != nil || res.ExitStatus != 0 || out.String() != want {
		t.Fatalf("process: %+v %v, output %q, want %q", res, err, out.String(), want)
	}
	okc("a process ran to its end after its Run ctx ended, as nobody (from the image's /etc/passwd) in the "+
		"container's dir, the input in place and writable, the input and the output owned by nobody: %q", out.String())

	found, ok, err := w.LookupContainer(ctx, "atc-core-task")
	if err != nil || !ok || found.user != "nobody" || found.dir != "/tmp/build/x" {
		t.Fatalf("LookupContainer: %v %v %+v", ok, err, found)
	}
	okc("LookupContainer found it with its defaults from the shim's properties")

	getReadsItsDir(t, ctx, w, image)
	unknownUser(t, ctx, w, image)
	podDeletedMidWait(t, ctx, w, kit, found)
}

// getReadsItsDir makes a container as ATC's get step does, naming only Dir: the mounts hold
// /scratch and a volume at Dir, both owned by the step user, and what the step wrote in Dir is
// what that volume streams out (ATC's get reads its result from the volume mounted at Dir).
func getReadsItsDir(t *testing.T, ctx context.Context, w *Worker, image string) {
	const dir = "/tmp/build/get"
	c, mounts, err := w.FindOrCreateContainer(ctx, "atc-core-get", ContainerSpec{Type: "get",
		StepName: "get", ImageSpec: ImageSpec{ImageURL: image}, Dir: dir, User: "nobody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := mountList(mounts); got != "/scratch=pod/atc-core-get/scratch,"+dir+"=pod/atc-core-get"+dir {
		t.Fatalf("mounts of a get naming only Dir: %s", got)
	}
	var out shimtest.Buffer
	p, err := c.Run(ctx, ProcessSpec{Path: "sh", Args: []string{"-c",
		`stat -c %U /scratch .; pwd; echo v1 > version; touch /scratch/x`}}, ProcessIO{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitStatus != 0 || out.String() != "nobody\nnobody\n"+dir+"\n" {
		t.Fatalf("the get's process: %+v %v, output %q", res, err, out.String())
	}
	r, err := mounts[1].Volume.StreamOut(ctx, "version", Raw)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err := tar.NewReader(r).Next()
	if err != nil || h.Name != "version" || h.Size != 3 {
		t.Fatalf("the volume at Dir streamed %+v, %v", h, err)
	}
	okc("a get naming only Dir got /scratch and %s, both the step user's, and the volume at Dir "+
		"streams what the step wrote there", dir)
}

func mountList(ms []VolumeMount) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.MountPath+"="+m.Volume.Handle())
	}
	return strings.Join(s, ",")
}

// podDeletedMidWait deletes the pod under a running Wait: Wait fails at once with the pod's reason.
func podDeletedMidWait(t *testing.T, ctx context.Context, w *Worker, kit *k8s.Worker, c *Container) {
	p, err := c.Run(ctx, ProcessSpec{ID: "long", Path: "sleep", Args: []string{"300"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, func() { _ = kit.Delete(context.Background(), c.Handle()) })
	start := time.Now()
	_, err = p.Wait(ctx)
	took := time.Since(start) - time.Second
	var gone *PodGoneError
	if !errors.As(err, &gone) || gone.Reason == "" {
		t.Fatalf("Wait with the pod deleted: %v, want a *PodGoneError", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Wait took %v after the delete", took)
	}
	okc("pod deleted mid-Wait: Wait failed %v after the delete with %v", took.Round(time.Millisecond), err)
	if err := kit.WaitGone(ctx, c.Handle()); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := w.LookupContainer(ctx, c.Handle()); ok || err != nil {
		t.Fatalf("LookupContainer of a deleted pod: %v %v", ok, err)
	}
	if _, err := c.Run(ctx, ProcessSpec{Path: "true"}, ProcessIO{}); !errors.As(err, &gone) {
		t.Fatalf("Run in a deleted pod: %v, want a *PodGoneError", err)
	}
	okc("after the pod is gone: LookupContainer finds nothing, Run fails at once with %v", gone)
}

// unknownUser: a run.user the image does not have makes the container anyway, as Garden does
// (the volumes keep their owners); a process run as that user then fails to start.
func unknownUser(t *testing.T, ctx context.Context, w *Worker, image string) {
	c, _, err := w.FindOrCreateContainer(ctx, "atc-core-nouser", ContainerSpec{Type: "task", StepName: "nouser",
		ImageSpec: ImageSpec{ImageURL: image}, Dir: "/tmp/build/n", User: "no-such-user"}, nil)
	if err != nil {
		t.Fatalf("a container whose user the image does not have: %v", err)
	}
	_, err = c.Run(ctx, ProcessSpec{Path: "true"}, ProcessIO{})
	if err == nil {
		t.Fatal("a process as a user the image does not have started")
	}
	okc("a run.user the image does not have: the container was made, a process as that user fails: %v", err)
}
