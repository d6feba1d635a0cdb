// Tests of the step spec's Hermetic, CertsConfigMap and CPURequest: validation, the pod's resources
// and mounts, the policy's rules, and Worker.Create and GC against a fake clientset recording the
// order of the API calls (the policy before the pod, the pod its owner, a failed pod taking its
// policy along, a policy left behind replaced or collected). The shapes themselves are the golden
// files' (golden_test.go).

package k8s

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestValidateRefusesBadSpecOptions(t *testing.T) {
	base := StepSpec{Name: "s", Image: "i", Delivery: FromConfigMap("c")}
	with := func(f func(*StepSpec)) StepSpec { s := base; f(&s); return s }
	for what, s := range map[string]StepSpec{
		"exclude each other": with(func(s *StepSpec) { s.CPU, s.CPURequest = "1", "100m" }),
		"cpu request":        with(func(s *StepSpec) { s.CPURequest = "a bit" }),
		"label value":        with(func(s *StepSpec) { s.Name, s.Hermetic = strings.Repeat("s", 64), true }),
		"/etc/ssl/certs": with(func(s *StepSpec) {
			s.CertsConfigMap = "ca"
			s.ImageVolumes = []ImageVolume{{From: ImageFrom{Pod: "p", Path: "/x"}, MountPath: "/etc/ssl/certs"}}
		}),
	} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: %v", what, err)
		}
	}
	ok := with(func(s *StepSpec) {
		s.Name, s.Hermetic, s.CPURequest, s.CertsConfigMap = strings.Repeat("s", 63), true, "100m", "ca"
	})
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

func TestCPURequestIsARequestWithoutALimit(t *testing.T) {
	spec := StepSpec{Name: "s", Image: "i", Delivery: FromConfigMap("c"), CPURequest: "250m"}
	r := mustStepPod(t, spec, "w", PodAuth{TokenSHA256: "h"}).Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "250m" || r.Limits != nil {
		t.Errorf("resources %+v", r)
	}
	spec.Memory = "1Gi"
	r = mustStepPod(t, spec, "w", PodAuth{TokenSHA256: "h"}).Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "250m" || r.Requests.Memory().String() != "1Gi" ||
		len(r.Limits) != 1 || r.Limits.Memory().String() != "1Gi" {
		t.Errorf("resources with memory %+v", r)
	}
}

// The policy selects the hermetic pod and no other pod of the worker, and lets it reach only the
// shim port of the worker's pods.
func TestHermeticPolicySelectsOnlyItsPod(t *testing.T) {
	spec := StepSpec{Name: "h", Image: "i", Delivery: FromConfigMap("c"), Hermetic: true}
	policy := HermeticPolicy("ci worker", "h")
	sel, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	other := spec
	other.Hermetic = false
	for _, c := range []struct {
		name   string
		spec   StepSpec
		worker string
		want   bool
	}{{"the pod", spec, "ci worker", true}, {"not hermetic", other, "ci worker", false},
		{"another worker's", spec, "other", false}} {
		pod := mustStepPod(t, c.spec, c.worker, PodAuth{TokenSHA256: "h"})
		if got := sel.Matches(labels.Set(pod.Labels)); got != c.want {
			t.Errorf("%s: selected %v", c.name, got)
		}
	}
	if policy.Spec.PolicyTypes[0] != networkingv1.PolicyTypeEgress || len(policy.Spec.PolicyTypes) != 1 ||
		policy.Spec.Ingress != nil {
		t.Errorf("types %v, ingress %v: want Egress only", policy.Spec.PolicyTypes, policy.Spec.Ingress)
	}
	rule := policy.Spec.Egress
	if len(rule) != 1 || len(rule[0].Ports) != 1 || rule[0].Ports[0].Port.IntValue() != ShimPort ||
		rule[0].To[0].PodSelector.MatchLabels[WorkerLabel] != "ci_worker" || len(rule[0].To[0].PodSelector.MatchLabels) != 1 {
		t.Errorf("egress %+v", rule)
	}
}

// calls is the fake clientset's create, patch and delete calls, as "verb resource/name".
func calls(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		var name string
		switch a := a.(type) {
		case k8stesting.CreateAction:
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		default:
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+name)
	}
	return out
}

func TestCreateHermeticMakesThePolicyFirstAndThePodItsOwner(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	// The apiserver gives a created pod its UID; the fake does not.
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).UID = types.UID("uid-h")
		return false, nil, nil
	})
	w := handWorker(t, cs, 0)
	spec := StepSpec{Name: "h", Image: "i", Delivery: FromConfigMap("c"), Hermetic: true, CertsConfigMap: "ca"}
	pod, err := w.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create networkpolicies/h-hermetic", "create pods/h", "patch networkpolicies/h-hermetic"}
	if got := calls(cs); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	np, err := cs.NetworkingV1().NetworkPolicies("steps").Get(ctx, "h-hermetic", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o := np.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].Name != "h" || o[0].UID != "uid-h" {
		t.Errorf("owners %+v", o)
	}
	if pod.Labels[HermeticLabel] != "h" {
		t.Errorf("labels %v", pod.Labels)
	}
	m := pod.Spec.Containers[0].VolumeMounts
	if last := m[len(m)-1]; last != (corev1.VolumeMount{Name: CertsVolume, MountPath: CertsDir, ReadOnly: true}) {
		t.Errorf("mounts %+v", m)
	}

	// A pod of that name already there: its create answers AlreadyExists, its policy stays.
	cs.ClearActions()
	if _, err := w.Create(ctx, spec); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create: %v", err)
	}
	if got := calls(cs); !slices.Equal(got, []string{"create networkpolicies/h-hermetic", "create pods/h"}) {
		t.Errorf("calls %v", got)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("steps").Get(ctx, "h-hermetic", metav1.GetOptions{}); err != nil {
		t.Errorf("the live pod's policy: %v", err)
	}

	// A policy an earlier attempt left without its pod is replaced.
	if err := cs.CoreV1().Pods("steps").Delete(ctx, "h", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	if _, err := w.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	want = []string{"create networkpolicies/h-hermetic", "delete networkpolicies/h-hermetic",
		"create networkpolicies/h-hermetic", "create pods/h", "patch networkpolicies/h-hermetic"}
	if got := calls(cs); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}

func TestAHermeticPodRefusedTakesItsPolicyAlong(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("admission webhook said no")
	})
	w := handWorker(t, cs, 0)
	_, err := w.Create(ctx, StepSpec{Name: "h", Image: "i", Delivery: FromConfigMap("c"), Hermetic: true})
	if err == nil || !strings.Contains(err.Error(), "said no") {
		t.Fatalf("create: %v", err)
	}
	want := []string{"create networkpolicies/h-hermetic", "create pods/h", "delete networkpolicies/h-hermetic"}
	if got := calls(cs); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	// A policy that cannot be created: no pod at all.
	cs = fake.NewClientset()
	cs.PrependReactor("create", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden, say")
	})
	w = handWorker(t, cs, 0)
	_, err = w.Create(ctx, StepSpec{Name: "h", Image: "i", Delivery: FromConfigMap("c"), Hermetic: true})
	if err == nil || !strings.Contains(err.Error(), "network policy h-hermetic") {
		t.Errorf("create: %v", err)
	}
	if got := calls(cs); !slices.Equal(got, []string{"create networkpolicies/h-hermetic"}) {
		t.Errorf("calls %v", got)
	}
}

func TestGCDeletesOnlyOldPoliciesOfPodsGone(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	policy := func(worker, pod string, age time.Duration) *networkingv1.NetworkPolicy {
		p := HermeticPolicy(worker, pod)
		p.Namespace, p.CreationTimestamp = "steps", metav1.NewTime(now.Add(-age))
		return p
	}
	cs := fake.NewClientset(policy("w", "live", time.Hour), policy("w", "gone", time.Hour),
		policy("w", "young", time.Second), policy("other", "theirs", time.Hour))
	w := handWorker(t, cs, 0, podAt(handWorker(t, cs, 0), "live", "10.0.0.1", FromConfigMap("c")))
	got, err := w.GCHermeticPolicies(ctx, time.Minute)
	if err != nil || !slices.Equal(got, []string{"gone-hermetic"}) {
		t.Errorf("gc chose %v (%v)", got, err)
	}
	list, _ := cs.NetworkingV1().NetworkPolicies("steps").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 3 {
		t.Errorf("%d policies left, want 3", len(list.Items))
	}
	deleting := policy("w", "x", time.Hour)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	if got := SelectPolicyGarbage([]*networkingv1.NetworkPolicy{deleting}, nil, 0, now); got != nil {
		t.Errorf("a policy already going was chosen: %v", got)
	}
}
