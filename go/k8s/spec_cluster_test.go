//go:build cluster

// The step spec's Hermetic, CertsConfigMap and CPURequest through the Go kit on a real cluster, as a
// worker holding only the RBAC `stepctl manifests` prints: the access review reports the
// networkpolicies verbs, a hermetic pod's policy is there, selects it and is owned by it, the step
// reads the CA bundle of the ConfigMap at /etc/ssl/certs, the pod requests CPU without a limit, the
// policy goes with the pod, and GC deletes one left without its pod.
// tests/cluster/tests.d/80-step-spec runs it with STEPSHIM_KIT_CERTS (the ConfigMap's name) and
// STEPSHIM_KIT_CERTS_FILE (the file it holds under ca-certificates.crt) besides readEnv's.

package k8s

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func okSpec(format string, args ...any) {
	fmt.Printf("80-step-spec: ok: go kit: "+format+"\n", args...)
}

func TestKitStepSpec(t *testing.T) {
	e := readEnv(t)
	certs, certsFile := os.Getenv("STEPSHIM_KIT_CERTS"), os.Getenv("STEPSHIM_KIT_CERTS_FILE")
	bundle, err := os.ReadFile(certsFile)
	if certs == "" || err != nil {
		t.Fatalf("STEPSHIM_KIT_CERTS and STEPSHIM_KIT_CERTS_FILE: %q, %v", certs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	w, _, cs := connect(t, ctx, e)
	h, err := w.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range h.NetworkPolicies {
		if !a.Allowed {
			t.Fatalf("check: %s %s not allowed: %+v", a.Verb, a.Resource, h.NetworkPolicies)
		}
	}
	if len(h.NetworkPolicies) != len(PolicyVerbs) {
		t.Fatalf("check reviewed %+v", h.NetworkPolicies)
	}
	okSpec("check: networkpolicies %v allowed", PolicyVerbs)

	spec := StepSpec{Name: "kit-sealed", Image: e.stepImage, Delivery: FromConfigMap(e.configMap), Hermetic: true,
		CertsConfigMap: certs, CPURequest: "120m"}
	pod, err := w.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	policies := cs.NetworkingV1().NetworkPolicies(e.namespace)
	mine := metav1.ListOptions{LabelSelector: WorkerLabel + "=go-kit," + HermeticLabel}
	list, err := policies.List(ctx, mine)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "kit-sealed-hermetic" {
		t.Fatalf("policies %v, %v", list, err)
	}
	np := list.Items[0]
	if o := np.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].UID != pod.UID {
		t.Fatalf("owners %+v, want pod %s", o, pod.UID)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != spec.Name {
		t.Fatalf("the policy selects %v (%v)", pods, err)
	}
	okSpec("policy %s selects pod %s alone and is owned by it", np.Name, spec.Name)

	if _, err := w.WaitReady(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	c, err := w.Connect(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	out, _, status := run(t, ctx, c, nil, "cat", CertsDir+"/ca-certificates.crt")
	if status != 0 || out != string(bundle) {
		t.Fatalf("cat %s/ca-certificates.crt: status %d, %d bytes, want the ConfigMap's %d", CertsDir, status, len(out), len(bundle))
	}
	okSpec("the step read the ConfigMap's %d-byte CA bundle at %s", len(bundle), CertsDir)
	r := w.Get(spec.Name).Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "120m" || !r.Limits.Cpu().IsZero() {
		t.Fatalf("resources %+v", r)
	}
	okSpec("CPURequest 120m: requests.cpu %s, no CPU limit", r.Requests.Cpu())

	if err := w.Delete(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitGone(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	for {
		list, err := policies.List(ctx, mine)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("policy %s outlived its pod", list.Items[0].Name)
		case <-time.After(500 * time.Millisecond):
		}
	}
	okSpec("the policy went with its pod")

	if _, err := policies.Create(ctx, HermeticPolicy("go-kit", "kit-ghost"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.GC(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	if list, err := policies.List(ctx, mine); err != nil || len(list.Items) != 0 {
		t.Fatalf("after GC: %v, %v", list, err)
	}
	okSpec("GC deleted policy kit-ghost-hermetic, left without its pod")
}
