// Command ready-lag measures what WaitReady gains by asking the shim itself: for N step pods created
// one after another, the time from the create to WaitReady's answer (the shim's first answer to the
// kit's probe, or the Ready condition if it came first) and to the pod's Ready condition in the
// informer's cache (the kubelet's readiness probe, then its status write). One line per pod, then
// the medians. Uses $KUBECONFIG; the pods are deleted as it goes.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"slices"
	"time"

	"stepshim.dev/go/k8s"
)

func main() {
	ns := flag.String("n", "default", "namespace of the pods")
	shimImage := flag.String("shim-image", "stepshim.local/stepshim:dev", "the shim's image (init container, TLS)")
	stepImage := flag.String("step-image", "stepshim.local/step:dev", "the step's image")
	pods := flag.Int("pods", 10, "how many pods")
	flag.Parse()
	ctx := context.Background()
	cs, err := k8s.Clientset("")
	if err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		log.Fatal(err)
	}
	key, err := k8s.NewKey(raw)
	if err != nil {
		log.Fatal(err)
	}
	w, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: *ns, Worker: "ready-lag", Key: key})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	var kit, cond []float64
	fmt.Println("pod wait_ready_s ready_condition_s")
	for i := range *pods {
		name := fmt.Sprintf("ready-lag-%d-%d", time.Now().Unix()%100000, i)
		k, c, err := one(ctx, w, k8s.StepSpec{Name: name, Image: *stepImage, Build: "b", Step: "s",
			Delivery: k8s.InitContainer(*shimImage)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %.3f %.3f\n", i+1, k, c)
		kit, cond = append(kit, k), append(cond, c)
	}
	fmt.Printf("median %.3f %.3f\n", median(kit), median(cond))
}

// one creates spec's pod and returns the seconds to WaitReady's answer and to the Ready condition.
func one(ctx context.Context, w *k8s.Worker, spec k8s.StepSpec) (float64, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := w.Create(ctx, spec); err != nil {
		return 0, 0, err
	}
	defer func() { _ = w.Delete(context.Background(), spec.Name) }()
	condition := make(chan time.Duration, 1)
	go func() {
		for ctx.Err() == nil {
			changed := w.Changes()
			if k8s.ProgressOf(w.Get(spec.Name)).Stage == k8s.Ready {
				condition <- time.Since(start)
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
			}
		}
	}()
	if _, err := w.WaitReady(ctx, spec.Name); err != nil {
		return 0, 0, err
	}
	kit := time.Since(start)
	select {
	case c := <-condition:
		return kit.Seconds(), c.Seconds(), nil
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("pod %s: no Ready condition: %w", spec.Name, ctx.Err())
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
