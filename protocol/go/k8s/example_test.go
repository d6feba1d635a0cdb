package k8s_test

import (
	"context"
	"log"
	"os"
	"time"

	shim "stepshim.dev/protocol/go"
	"stepshim.dev/protocol/go/k8s"
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
	p, err := shim.NewContainer(c).Run(ctx, shim.ProcessSpec{ID: "task", Path: "go", Args: []string{"test", "./..."}},
		shim.ProcessIO{Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	status, err := p.Wait(ctx)
	log.Printf("exit %d (%v)", status, err)
	// Every tick: delete what no build wants any more, sparing pods younger than a minute.
	if _, err := w.GC(ctx, []string{"build-42-test"}, time.Minute); err != nil {
		log.Print(err)
	}
}
