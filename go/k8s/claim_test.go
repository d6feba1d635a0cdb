// Tests of StepSpec.Claims: the pod's volumes and mounts, Validate's refusals.

package k8s

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestClaimsAreMountedReadWriteAfterTheOtherVolumes(t *testing.T) {
	spec := StepSpec{Name: "s", Image: "i", Delivery: FromConfigMap("c"), CertsConfigMap: "ca"}
	plain := mustStepPod(t, spec, "w", PodAuth{TokenSHA256: "h"})
	spec.Claims = []ClaimMount{{Claim: "w-volumes", MountPath: "/volumes"}, {Claim: "other.claim", MountPath: "/x/y"}}
	pod := mustStepPod(t, spec, "w", PodAuth{TokenSHA256: "h"})

	v := pod.Spec.Volumes
	if len(v) != len(plain.Spec.Volumes)+2 || !reflect.DeepEqual(v[:len(plain.Spec.Volumes)], plain.Spec.Volumes) {
		t.Fatalf("volumes %+v", v)
	}
	for i, want := range []string{"w-volumes", "other.claim"} {
		got := v[len(plain.Spec.Volumes)+i]
		if got.Name != ClaimVolumeName(i) || got.PersistentVolumeClaim == nil ||
			*got.PersistentVolumeClaim != (corev1.PersistentVolumeClaimVolumeSource{ClaimName: want}) {
			t.Errorf("volume %d: %+v", i, got)
		}
	}
	m := pod.Spec.Containers[0].VolumeMounts
	want := append(slices.Clone(plain.Spec.Containers[0].VolumeMounts),
		corev1.VolumeMount{Name: "claim-0", MountPath: "/volumes"},
		corev1.VolumeMount{Name: "claim-1", MountPath: "/x/y"})
	if !reflect.DeepEqual(m, want) {
		t.Errorf("mounts %+v, want %+v", m, want)
	}
	// Nothing else of the pod changes.
	pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts = plain.Spec.Volumes, plain.Spec.Containers[0].VolumeMounts
	if !reflect.DeepEqual(pod, plain) {
		t.Error("claims changed more than the volumes and mounts")
	}
}

func TestValidateRefusesBadClaims(t *testing.T) {
	base := StepSpec{Name: "s", Image: "i", Delivery: FromConfigMap("c")}
	with := func(claims ...ClaimMount) StepSpec { s := base; s.Claims = claims; return s }
	ok := with(ClaimMount{"a", "/a"}, ClaimMount{"a", "/a/b"}, ClaimMount{"b.c-d", "/etc/ssl"})
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	iv := with(ClaimMount{"a", "/img"})
	iv.ImageVolumes = []ImageVolume{{From: ImageFrom{Pod: "p", Path: "/x"}, MountPath: "/img"}}
	certs := with(ClaimMount{"a", CertsDir})
	certs.CertsConfigMap = "ca"
	for what, s := range map[string]StepSpec{
		"not a DNS subdomain":    with(ClaimMount{"Upper", "/a"}),
		"claim \"\"":             with(ClaimMount{"", "/a"}),
		"a_b\": not a DNS":       with(ClaimMount{"a_b", "/a"}),
		"at \"relative\"":        with(ClaimMount{"a", "relative"}),
		"at \"\"":                with(ClaimMount{"a", ""}),
		"at \"/\"":               with(ClaimMount{"a", "/"}),
		"at \"/a/\"":             with(ClaimMount{"a", "/a/"}),
		"at \"/a/../b\"":         with(ClaimMount{"a", "/a/../b"}),
		"at \"//a\"":             with(ClaimMount{"a", "//a"}),
		"at \"/a\": want":        with(ClaimMount{"a", "/a"}, ClaimMount{"b", "/a"}),
		"at \"/img\"":            iv,
		"at \"/etc/ssl/certs\"":  certs,
		"at \"" + ShimDir + "\"": with(ClaimMount{"a", ShimDir}),
	} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: %v", what, err)
		}
		if _, err := StepPod(s, "w", PodAuth{TokenSHA256: "h"}); err == nil {
			t.Errorf("%s: StepPod made a pod", what)
		}
	}
}
