// Tests of StepSpec.Claims (the pod's volumes and mounts, Validate's refusals) and of EnsureClaim and
// DeleteClaim against a fake clientset (the claim's shape, AlreadyExists and NotFound as success).

package k8s

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

func TestEnsureClaimCreatesTheWorkersClaimOnce(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	w := handWorker(t, cs, 0)
	if err := w.EnsureClaim(ctx, "w-volumes", "stepshim-local", "2Gi"); err != nil {
		t.Fatal(err)
	}
	pvc, err := cs.CoreV1().PersistentVolumeClaims("steps").Get(ctx, "w-volumes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pvc.Labels, map[string]string{WorkerLabel: "w", PartOfLabel: "stepshim"}) {
		t.Errorf("labels %v", pvc.Labels)
	}
	s := pvc.Spec
	if !slices.Equal(s.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		s.StorageClassName == nil || *s.StorageClassName != "stepshim-local" ||
		len(s.Resources.Requests) != 1 || s.Resources.Requests.Storage().String() != "2Gi" || s.Resources.Limits != nil {
		t.Errorf("spec %+v", s)
	}

	// Already there: success, and the claim is left as it was.
	cs.ClearActions()
	if err := w.EnsureClaim(ctx, "w-volumes", "", "5Gi"); err != nil {
		t.Errorf("a second ensure: %v", err)
	}
	if got := calls(cs); !slices.Equal(got, []string{"create persistentvolumeclaims/w-volumes"}) {
		t.Errorf("calls %v", got)
	}
	again, _ := cs.CoreV1().PersistentVolumeClaims("steps").Get(ctx, "w-volumes", metav1.GetOptions{})
	if again.Spec.Resources.Requests.Storage().String() != "2Gi" {
		t.Errorf("the existing claim was changed: %+v", again.Spec)
	}

	// No class: the field is left out, so the cluster's default class applies.
	if err := w.EnsureClaim(ctx, "w-default", "", "1Gi"); err != nil {
		t.Fatal(err)
	}
	def, _ := cs.CoreV1().PersistentVolumeClaims("steps").Get(ctx, "w-default", metav1.GetOptions{})
	if def.Spec.StorageClassName != nil {
		t.Errorf("class %q, want none", *def.Spec.StorageClassName)
	}
}

func TestEnsureClaimRefusesBadArgumentsBeforeAnyRequest(t *testing.T) {
	cs := fake.NewClientset()
	w := handWorker(t, cs, 0)
	for what, args := range map[string][2]string{
		"not a DNS subdomain": {"Bad_Name", "1Gi"},
		"size \"lots\"":       {"c", "lots"},
		"size \"\"":           {"c", ""},
		"more than zero":      {"c", "0"},
		"size \"-1Gi\"":       {"c", "-1Gi"},
	} {
		if err := w.EnsureClaim(context.Background(), args[0], "", args[1]); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if a := cs.Actions(); len(a) != 0 {
		t.Errorf("requests %v", a)
	}
}

func TestClaimErrorsOtherThanTheExpectedOnesAreReturned(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	w := handWorker(t, cs, 0)
	// Deleting a claim that is not there is success.
	if err := w.DeleteClaim(ctx, "gone"); err != nil {
		t.Errorf("delete of a missing claim: %v", err)
	}
	if err := w.EnsureClaim(ctx, "c", "", "1Gi"); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteClaim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("steps").Get(ctx, "c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claim is still there: %v", err)
	}

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "c", errors.New("no"))
	cs.PrependReactor("*", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden
	})
	if err := w.EnsureClaim(ctx, "c", "", "1Gi"); !apierrors.IsForbidden(err) {
		t.Errorf("ensure without the right: %v", err)
	}
	if err := w.DeleteClaim(ctx, "c"); !apierrors.IsForbidden(err) {
		t.Errorf("delete without the right: %v", err)
	}
}
