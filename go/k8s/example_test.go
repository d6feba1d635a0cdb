package k8s_test

import (
	"context"
	"log"
	"os"
	"time"

	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// How ATC runs a step: one Worker per worker name (one informer), a pod per step, then everything
// over HTTP to the pod's shim. After a restart, NewWorker with the same key reaches the same shims.
func Example() {
	ctx := context.Background()
	cs, err := k8s.Clientset("") // $KUBECONFIG, ~/.kube/config or in-cluster
	if err != nil {
		log.Fatal(err)
	}
	key, err := k8s.KeyFromFile("/etc/concourse/stepshim.key")
	if err != nil {
		log.Fatal(err)
	}
	w, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: "ci", Worker: "k8s-worker", Key: key})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Create(ctx, k8s.StepSpec{
		Name: "build-42-test", Image: "golang:1.26", Build: "main/42", Step: "test",
		CPU: "2", Memory: "4Gi", Delivery: k8s.InitContainer("stepshim/stepshim:v1"),
	}); err != nil {
		log.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := w.WaitReady(waitCtx, "build-42-test"); err != nil {
		log.Fatal(err) // e.g. "pod build-42-test cannot start: ErrImagePull: ..."
	}
	c, err := w.Connect(ctx, "build-42-test") // refuses a shim of another protocol version
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Run(ctx, "task", shim.Spec{Path: "go", Args: []string{"test", "./..."}}); err != nil {
		log.Fatal(err)
	}
	exit, err := c.Follow(ctx, "task", 0, func(f shim.Frame) error {
		var err error
		switch f.Type { // the exit frame comes last; Follow returns it
		case shim.FrameStdout:
			_, err = os.Stdout.Write(f.Payload)
		case shim.FrameStderr:
			_, err = os.Stderr.Write(f.Payload)
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("exit %d", exit.Status)
	// Every tick: delete what no build wants any more, sparing pods younger than a minute.
	if _, err := w.GC(ctx, []string{"build-42-test"}, time.Minute); err != nil {
		log.Print(err)
	}
}

// A later step runs the image an earlier step built into its output directory: no registry, the
// kubelet pulls it from the earlier pod's shim through the node-local forwarder.
func ExampleImageFrom() {
	ctx := context.Background()
	cs, err := k8s.Clientset("")
	if err != nil {
		log.Fatal(err)
	}
	key, err := k8s.KeyFromFile("/etc/concourse/stepshim.key")
	if err != nil {
		log.Fatal(err)
	}
	w, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: "ci", Worker: "k8s-worker", Key: key,
		ForwarderPort: 7779, ImageGrantTTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	// build-42-image has written /tmp/build/out/app-image (rootfs/ and metadata.json, or an OCI
	// layout); the image is named app-image and pinned by its digest.
	pod, err := w.Create(ctx, k8s.StepSpec{
		Name: "build-42-test", Build: "main/42", Step: "test",
		ImageFrom: &k8s.ImageFrom{Pod: "build-42-image", Path: "/tmp/build/out/app-image"},
		Delivery:  k8s.InitContainer("stepshim/stepshim:v1"),
	})
	if err != nil {
		log.Fatal(err) // e.g. "k8s: build-42-image:/tmp/build/out/app-image is not an image the shim serves: ..."
	}
	log.Print(pod.Spec.Containers[0].Image) // 127.0.0.1:7779/10.244.0.17/app-image@sha256:...
	if _, err := w.WaitReady(ctx, pod.Name); err != nil {
		log.Fatal(err) // a failed pull: "pod build-42-test cannot start: ErrImagePull: ..."
	}
}
