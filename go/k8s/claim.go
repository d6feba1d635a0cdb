// PersistentVolumeClaims for step pods: StepSpec.Claims mounts claims into the main container (volumes
// claim-0, claim-1, ...), and Worker.EnsureClaim and DeleteClaim make and remove a claim of the
// worker. A claim outlives every pod that mounts it, so files a pod keeps there survive the pod: a
// volume kept for later pods of the worker need not live as long as the pod holding it.

package k8s

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// PartOfLabel is the label naming the application of the objects the worker creates outside the
// pods (claims); its value is "stepshim", as on the objects `stepctl manifests` prints.
const PartOfLabel = "app.kubernetes.io/part-of"

// ClaimVerbs are the verbs on persistentvolumeclaims that EnsureClaim and DeleteClaim need: read a
// claim, create one, delete one (`stepctl manifests` grants them).
var ClaimVerbs = []string{"get", "create", "delete"}

// ClaimMount is a PersistentVolumeClaim of the pod's namespace mounted read-write into the step's
// main container.
type ClaimMount struct {
	// Claim is the claim's name (a DNS subdomain).
	Claim string
	// MountPath is where the main container sees the volume: absolute, clean, not "/".
	MountPath string
}

// ClaimVolumeName is the pod volume of StepSpec.Claims[i]: "claim-<i>".
func ClaimVolumeName(i int) string { return "claim-" + strconv.Itoa(i) }

// validateClaims refuses a claim that is not a DNS subdomain, or a mount path that is not absolute
// and clean, is "/", or is already in mounts (which it then takes).
func validateClaims(claims []ClaimMount, mounts map[string]bool) error {
	for _, c := range claims {
		if errs := validation.IsDNS1123Subdomain(c.Claim); len(errs) > 0 {
			return fmt.Errorf("claim %q: not a DNS subdomain: %s", c.Claim, strings.Join(errs, "; "))
		}
		p := c.MountPath
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || mounts[p] {
			return fmt.Errorf("claim %s at %q: want an absolute, clean path, not /, once", c.Claim, p)
		}
		mounts[p] = true
	}
	return nil
}

// addClaims mounts spec's claims into the pod's main container, after its other volumes.
func addClaims(pod *corev1.Pod, spec StepSpec) {
	c := &pod.Spec.Containers[0]
	for i, m := range spec.Claims {
		name := ClaimVolumeName(i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Claim},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: m.MountPath})
	}
}

// claimObject is the claim EnsureClaim creates: ReadWriteOnce, of storageClass (empty: the field
// left out, so the cluster's default class), requesting size, labelled with the worker.
func claimObject(name, namespace, worker, storageClass, size string) (*corev1.PersistentVolumeClaim, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("k8s: claim %q: not a DNS subdomain: %s", name, strings.Join(errs, "; "))
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return nil, fmt.Errorf("k8s: claim %s: size %q: %w", name, size, err)
	}
	if q.Sign() <= 0 {
		return nil, fmt.Errorf("k8s: claim %s: size %q: want more than zero", name, size)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			WorkerLabel: LabelValue(worker),
			PartOfLabel: "stepshim",
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: q},
			},
		},
	}
	if storageClass != "" {
		pvc.Spec.StorageClassName = &storageClass
	}
	return pvc, nil
}

// EnsureClaim makes sure the worker's namespace has the PersistentVolumeClaim name: if it does not,
// it creates it, ReadWriteOnce, of storageClass ("" for the cluster's default class), requesting
// size (a quantity such as "10Gi"), labelled with the worker. A claim of that name already there is
// success, whatever its class and size. A bad name or size is an error before any request. The
// claim binds, and its volume is provisioned, as its class says (often only once a pod uses it).
func (w *Worker) EnsureClaim(ctx context.Context, name, storageClass, size string) error {
	pvc, err := claimObject(name, w.namespace, w.worker, storageClass, size)
	if err != nil {
		return err
	}
	_, err = w.cs.CoreV1().PersistentVolumeClaims(w.namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("k8s: creating claim %s: %w", name, err)
	}
	return nil
}

// DeleteClaim deletes the PersistentVolumeClaim name of the worker's namespace; a claim already gone
// is not an error. Kubernetes keeps a claim a pod still mounts until that pod is gone; what becomes
// of its volume is its class's reclaim policy.
func (w *Worker) DeleteClaim(ctx context.Context, name string) error {
	err := w.cs.CoreV1().PersistentVolumeClaims(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("k8s: deleting claim %s: %w", name, err)
	}
	return nil
}
