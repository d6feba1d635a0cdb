// Hermetic step pods (StepSpec.Hermetic), as the Rust controller's hermetic.rs: the pod's own
// NetworkPolicy, created before the pod so that the step never runs without it, then owned by the
// pod (Kubernetes deletes it with the pod; GC deletes those a worker that died in between left).
//
// The policy selects exactly that pod, by the label HermeticLabel=<pod name> that only a hermetic
// pod carries, and is of type Egress only: everything the pod sends is denied but TCP to the shim
// port of the worker's own pods (a pull of an input from another step pod is the destination
// shim's outbound connection). DNS is denied too: a resolver forwarding outside the cluster is a
// way out, and nothing a hermetic step needs has a name. Ingress is left to the namespace's other
// policies (`stepctl manifests --network-policy`): the controller, the pulls of other step pods,
// the forwarder's image pulls and the kubelet's probe reach the shim as before, and their replies
// are part of those connections, which an Egress rule does not cut.

package k8s

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// HermeticLabel is the label, valued with the pod's name, of a hermetic pod and of its policy: the
// policy selects the pod by it and GC lists the policies by it.
const HermeticLabel = "stepshim.dev/hermetic"

// PolicyVerbs are the verbs on networkpolicies (networking.k8s.io) that hermetic pods need: create
// the pod's policy, make the pod its owner, and let GC list and delete those left behind.
var PolicyVerbs = []string{"list", "create", "patch", "delete"}

// HermeticPolicyName is the name of pod's NetworkPolicy.
func HermeticPolicyName(pod string) string { return pod + "-hermetic" }

// HermeticPolicy is the NetworkPolicy of the hermetic pod of worker: egress only to the shim port
// of the worker's pods.
func HermeticPolicy(worker, pod string) *networkingv1.NetworkPolicy {
	labels := map[string]string{WorkerLabel: LabelValue(worker), HermeticLabel: pod}
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(ShimPort)
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: HermeticPolicyName(pod), Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: labels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{WorkerLabel: LabelValue(worker)},
				}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
}

// createPod creates pod, spec's, and for a hermetic spec its policy first: a policy an earlier
// attempt left is replaced unless its pod is still there (then the pod's create answers
// AlreadyExists and the policy stays). A pod that cannot be created takes its new policy with it; a pod
// created that cannot be made the policy's owner is returned with an error saying so (GC deletes
// the policy once the pod is gone).
func (w *Worker) createPod(ctx context.Context, spec StepSpec, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := w.cs.CoreV1().Pods(w.namespace)
	if !spec.Hermetic {
		return pods.Create(ctx, pod, metav1.CreateOptions{})
	}
	policies := w.cs.NetworkingV1().NetworkPolicies(w.namespace)
	policy := HermeticPolicy(w.worker, spec.Name)
	_, err := policies.Create(ctx, policy, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A pod still there keeps its policy (its own create answers AlreadyExists below); a policy
		// an earlier attempt left without its pod is replaced.
		_, err = pods.Get(ctx, spec.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if err = w.deletePolicy(ctx, policy.Name); err == nil {
				_, err = policies.Create(ctx, policy, metav1.CreateOptions{})
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("k8s: network policy %s of hermetic pod %s: %w", policy.Name, spec.Name, err)
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		// A pod of that name already there may be the policy's: leave the policy to GC.
		if !apierrors.IsAlreadyExists(err) {
			_ = w.deletePolicy(ctx, policy.Name)
		}
		return nil, err
	}
	_, err = policies.Patch(ctx, policy.Name, types.MergePatchType, OwnerPatch(created.Name, string(created.UID)),
		metav1.PatchOptions{})
	if err != nil {
		return created, fmt.Errorf("k8s: pod %s created, but it cannot own its network policy (GC deletes it "+
			"once the pod is gone): %w", created.Name, err)
	}
	return created, nil
}

func (w *Worker) deletePolicy(ctx context.Context, name string) error {
	err := w.cs.NetworkingV1().NetworkPolicies(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// SelectPolicyGarbage is the names of the hermetic pods' policies to delete at now: not already
// being deleted, at least grace old (the pod may be being created), and selecting a pod not in
// pods. Pure, so the rule is tested apart from the cluster.
func SelectPolicyGarbage(policies []*networkingv1.NetworkPolicy, pods map[string]bool, grace time.Duration, now time.Time) []string {
	metas := make([]*metav1.ObjectMeta, len(policies))
	for i, p := range policies {
		metas[i] = &p.ObjectMeta
	}
	return selectObjects(metas, func(m *metav1.ObjectMeta) (string, bool) {
		pod, ok := m.Labels[HermeticLabel]
		return pod, ok
	}, pods, grace, now)
}

// GCHermeticPolicies deletes the worker's hermetic pods' policies whose pod is gone, once at least
// grace old, and returns their names. Credentials without rights on networkpolicies (a Role from
// before hermetic pods) make it a no-op.
func (w *Worker) GCHermeticPolicies(ctx context.Context, grace time.Duration) ([]string, error) {
	selector := WorkerLabel + "=" + LabelValue(w.worker) + "," + HermeticLabel
	list, err := w.cs.NetworkingV1().NetworkPolicies(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("k8s: gc: list network policies: %w", err)
	}
	pods := map[string]bool{}
	for _, p := range w.List() {
		pods[p.Name] = true
	}
	policies := make([]*networkingv1.NetworkPolicy, len(list.Items))
	for i := range list.Items {
		policies[i] = &list.Items[i]
	}
	chosen := SelectPolicyGarbage(policies, pods, grace, time.Now())
	var errs []error
	for _, name := range chosen {
		if err := w.deletePolicy(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("k8s: gc: delete network policy %s: %w", name, err))
		}
	}
	return chosen, errors.Join(errs...)
}
