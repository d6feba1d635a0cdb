// PersistentVolumeClaims for step pods: StepSpec.Claims mounts claims into the main container (volumes
// claim-0, claim-1, ...). A claim outlives every pod that mounts it, so files a pod keeps there
// survive the pod: a volume kept for later pods of the worker need not live as long as the pod
// holding it.

package k8s

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

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
