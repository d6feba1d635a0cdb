// WaitReady asking the shim itself: a pod with an IP whose shim answers (with the pod's TLS key) is
// ready before its Ready condition; an impostor at the IP, or a pod being deleted, is not.

package k8s

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startingPod is the pod w would create for name, at ip, as the kubelet reports it while the
// init container runs: Pending, scheduled, no Ready condition.
func startingPod(w *Worker, name, ip string) *corev1.Pod {
	p := podAt(w, name, ip, InitContainer("img"))
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	return p
}

func TestWaitReadyTakesTheShimsAnswerBeforeTheCondition(t *testing.T) {
	base := fmt.Sprintf("127.%d.%d.", 100+rand.N(100), rand.N(250))
	w := handWorker(t, nil, 0)
	_, port := fakeShim(t, base+"1", 0, carrier(t, w.Token("step")))
	_, _ = fakeShim(t, base+"2", port, carrier(t, w.Token("other")))
	ending := startingPod(w, "ending", base+"1")
	ending.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	w = handWorker(t, nil, port, startingPod(w, "step", base+"1"), startingPod(w, "impostor", base+"2"), ending)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []Progress
	start := time.Now()
	ip, err := w.WaitProgress(ctx, "step", func(p Progress) { seen = append(seen, p) })
	if err != nil || ip != base+"1" {
		t.Fatalf("WaitReady: %q, %v; want %s", ip, err, base+"1")
	}
	if last := seen[len(seen)-1]; last.Stage != Ready || last.Detail != ip {
		t.Errorf("last progress reported %v, want ready at %s", last, ip)
	}
	t.Logf("ready after %v on the shim's answer (progress %v)", time.Since(start), seen)

	// The shim at the impostor's IP holds another pod's key: its answer fails the pin. A pod being
	// deleted is not asked at all (its shim answers with the right key).
	for _, name := range []string{"impostor", "ending"} {
		short, cancel := context.WithTimeout(context.Background(), 10*ProbeInterval)
		_, err := w.WaitReady(short, name)
		cancel()
		var nr *NotReadyError
		if !errors.As(err, &nr) {
			t.Errorf("WaitReady(%s) = %v, want a *NotReadyError", name, err)
		}
	}
}
