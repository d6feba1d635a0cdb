// Garbage collection, retirement and the credentials check of a worker, as the Rust controller's gc.rs.
//
// GC reads the informer's cache (no list per tick) and deletes the worker's pods that are not in the
// desired set once they are older than a grace period, so a pod another request is creating right now
// is never collected. Retire deletes every pod of the worker. Check confirms the apiserver answers and,
// with SelfSubjectAccessReview, that the credentials hold the pod verbs a worker needs and none of the
// exec family it must not need, whether they allow reaching shims through the apiserver, and the
// rights images of step pods (secrets) and hermetic pods (networkpolicies) need.

package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodVerbs are the verbs on pods a worker needs (the Role `stepctl manifests` prints grants them).
var PodVerbs = []string{"get", "list", "watch", "create", "delete"}

// ProxyVerbs are the verbs on pods/proxy that ShimViaProxy needs: the apiserver authorizes a proxied
// request by its method (GET get, POST create, PUT update, DELETE delete), and the protocol uses those
// four (`stepctl manifests --via proxy` grants them).
var ProxyVerbs = []string{"get", "create", "update", "delete"}

// SecretVerbs are the verbs on secrets that images of step pods (StepSpec.ImageFrom) need: create an
// image-pull Secret, make the pod its owner, and let GC list and delete those left behind.
var SecretVerbs = []string{"list", "create", "patch", "delete"}

// Unneeded are the rights a worker never uses, as resource/subresource and verb: holding them is
// over-privileged.
var Unneeded = [][2]string{
	{"pods/exec", "create"},
	{"pods/attach", "create"},
	{"pods/portforward", "create"},
}

// SelectGarbage is the names of the pods to collect at now: not in desired, not already being deleted,
// and at least grace old (a pod without a creation time counts as new). Pure, so the rule is tested
// apart from the cluster.
func SelectGarbage(pods []*corev1.Pod, desired map[string]bool, grace time.Duration, now time.Time) []string {
	metas := make([]*metav1.ObjectMeta, len(pods))
	for i, p := range pods {
		metas[i] = &p.ObjectMeta
	}
	return selectObjects(metas, func(m *metav1.ObjectMeta) (string, bool) { return m.Name, true }, desired, grace, now)
}

// selectObjects is the names of the objects to delete at now: not already being deleted, at least
// grace old (one without a creation time counts as new: it may be being created), and whose pod
// (podOf: a pod's own name, or the pod a Secret or a policy was made for) is not in keep.
func selectObjects(metas []*metav1.ObjectMeta, podOf func(*metav1.ObjectMeta) (string, bool), keep map[string]bool, grace time.Duration, now time.Time) []string {
	var out []string
	for _, m := range metas {
		pod, ok := podOf(m)
		if !ok || m.DeletionTimestamp != nil || keep[pod] {
			continue
		}
		age := time.Duration(0)
		if !m.CreationTimestamp.IsZero() {
			age = max(now.Sub(m.CreationTimestamp.Time), 0)
		}
		if age >= grace {
			out = append(out, m.Name)
		}
	}
	return out
}

// GC deletes the worker's pods whose names are not in desired and that are at least grace old; it
// returns the names it deleted (or was deleting when an error stopped it). It then deletes the
// image-pull Secrets and the hermetic pods' NetworkPolicies whose pod is gone (GCImageSecrets,
// GCHermeticPolicies).
func (w *Worker) GC(ctx context.Context, desired []string, grace time.Duration) ([]string, error) {
	want := make(map[string]bool, len(desired))
	for _, d := range desired {
		want[d] = true
	}
	chosen := SelectGarbage(w.List(), want, grace, time.Now())
	for i, name := range chosen {
		if err := w.Delete(ctx, name); err != nil {
			return chosen[:i+1], fmt.Errorf("k8s: gc: delete %s: %w", name, err)
		}
	}
	// Image-pull Secrets and hermetic pods' policies whose pod is gone (a worker died before the pod
	// owned them).
	_, secretErr := w.GCImageSecrets(ctx, grace)
	_, policyErr := w.GCHermeticPolicies(ctx, grace)
	return chosen, errors.Join(secretErr, policyErr)
}

// Retire deletes every pod of the worker; it returns their names.
func (w *Worker) Retire(ctx context.Context) ([]string, error) {
	return w.GC(ctx, nil, 0)
}

// Access is the answer to one access check.
type Access struct {
	Resource string `json:"resource"`
	Verb     string `json:"verb"`
	Allowed  bool   `json:"allowed"`
}

// Health is the result of Check.
type Health struct {
	ServerVersion string `json:"serverVersion"`
	Namespace     string `json:"namespace"`
	// Needed are the pod verbs, with their answers; every one must be allowed.
	Needed []Access `json:"needed"`
	// Unneeded are the exec family's rights, with their answers; an allowed one is a warning.
	Unneeded []Access `json:"unneeded"`
	// Proxy are the pods/proxy verbs ShimViaProxy needs, with their answers.
	Proxy []Access `json:"proxy"`
	// Secrets are the verbs on secrets that images of step pods (StepSpec.ImageFrom) need, with
	// their answers; they do not count in OK.
	Secrets []Access `json:"secrets"`
	// NetworkPolicies are the verbs on networkpolicies that hermetic pods (StepSpec.Hermetic) need,
	// with their answers; they do not count in OK.
	NetworkPolicies []Access `json:"networkPolicies"`
	// ProxyAllowed says every one of them is: the worker may reach shims through the apiserver.
	// Reaching them at pod IPs needs no right, only a route, which no access review can tell.
	ProxyAllowed bool `json:"proxyAllowed"`
	// OK says every needed verb is allowed.
	OK bool `json:"ok"`
}

// Warnings names the rights held but never needed, one line each.
func (h *Health) Warnings() []string {
	var out []string
	for _, a := range h.Unneeded {
		if a.Allowed {
			out = append(out, fmt.Sprintf("%s %s is allowed but never needed", a.Verb, a.Resource))
		}
	}
	return out
}

// Check asks the apiserver's version and, by SelfSubjectAccessReview, which of the needed and the
// unneeded rights the worker's credentials hold in its namespace.
func (w *Worker) Check(ctx context.Context) (*Health, error) {
	v, err := w.cs.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("k8s: server version: %w", err)
	}
	h := &Health{ServerVersion: v.GitVersion, Namespace: w.namespace, OK: true, ProxyAllowed: true}
	for _, verb := range PodVerbs {
		a, err := w.review(ctx, "pods", verb)
		if err != nil {
			return nil, err
		}
		h.Needed = append(h.Needed, a)
		h.OK = h.OK && a.Allowed
	}
	for _, verb := range ProxyVerbs {
		a, err := w.review(ctx, "pods/proxy", verb)
		if err != nil {
			return nil, err
		}
		h.Proxy = append(h.Proxy, a)
		h.ProxyAllowed = h.ProxyAllowed && a.Allowed
	}
	for _, verb := range SecretVerbs {
		a, err := w.review(ctx, "secrets", verb)
		if err != nil {
			return nil, err
		}
		h.Secrets = append(h.Secrets, a)
	}
	for _, verb := range PolicyVerbs {
		a, err := w.review(ctx, "networkpolicies.networking.k8s.io", verb)
		if err != nil {
			return nil, err
		}
		h.NetworkPolicies = append(h.NetworkPolicies, a)
	}
	for _, u := range Unneeded {
		a, err := w.review(ctx, u[0], u[1])
		if err != nil {
			return nil, err
		}
		h.Unneeded = append(h.Unneeded, a)
	}
	return h, nil
}

func (w *Worker) review(ctx context.Context, resource, verb string) (Access, error) {
	// "resource[.group][/subresource]" as kubectl names them, no group for the core group.
	res, sub, _ := strings.Cut(resource, "/")
	res, group, _ := strings.Cut(res, ".")
	r := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authv1.ResourceAttributes{
			Namespace: w.namespace, Group: group, Resource: res, Subresource: sub, Verb: verb,
		},
	}}
	answer, err := w.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
	if err != nil {
		return Access{}, fmt.Errorf("k8s: access review %s %s: %w", verb, resource, err)
	}
	return Access{Resource: resource, Verb: verb, Allowed: answer.Status.Allowed}, nil
}
