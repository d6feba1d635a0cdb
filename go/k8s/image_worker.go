// Images from step pods, the I/O, as the Rust controller's image_source.rs: a read grant on the
// source pod's shim for the directory (a fresh random token, Config.ImageGrantTTL, no use limit),
// the image resolved to its digest with that grant (HEAD /v2/<name>/manifests/latest), then the
// consuming pod created with the reference as its image or image volumes and one image-pull Secret
// holding the forwarder's credentials for all of them, which the pod then owns (Kubernetes deletes it with the pod; GC deletes those a
// worker that died in between left). The pod's own token never leaves the worker: the Secret holds
// the grant's, and the grant expires by its ttl.

package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"stepshim.dev/go/shim"
)

type imageSettings struct {
	port     int
	ttl      time.Duration
	viaProxy bool
}

func settingsOf(cfg Config) imageSettings {
	s := imageSettings{port: cfg.ForwarderPort, ttl: cfg.ImageGrantTTL, viaProxy: cfg.ImagesViaProxy}
	if s.port == 0 {
		s.port = DefaultForwarderPort
	}
	if s.ttl == 0 {
		s.ttl = DefaultImageGrantTTL
	}
	return s
}

// SourceImage is an image of a step pod, granted and resolved, ready for a pod to name.
type SourceImage struct {
	From ImageFrom
	// Reference is 127.0.0.1:<port>/<source IP>/<name>@<digest>.
	Reference string
	// Username and Password are what the kubelet presents to the forwarder: ForwarderUser of the
	// source's pin, and the grant token.
	Username, Password string
	// GrantID is the grant's id on the source shim (RevokeGrant ends it early).
	GrantID string
}

// ResolveImage makes a read grant for from.Path on c (the source pod's shim, with the pod's token)
// for ttl and resolves the image's digest with it; the grant is revoked if the image does not
// resolve. It returns the grant token and id and the manifest.
func ResolveImage(ctx context.Context, c *shim.Client, from ImageFrom, ttl time.Duration) (token, grantID string, m *shim.ManifestHead, err error) {
	name, err := from.Name()
	if err != nil {
		return "", "", nil, err
	}
	token, g, err := c.Grant(ctx, from.Path, ttl, 0)
	if err != nil {
		return "", "", nil, fmt.Errorf("k8s: cannot make a grant for %s on pod %s: %w", from.Path, from.Pod, err)
	}
	m, err = c.WithGrantToken(token).ImageManifest(ctx, name, "latest")
	if err != nil {
		_ = c.RevokeGrant(ctx, g.ID)
		return "", "", nil, fmt.Errorf("k8s: %s is not an image the shim serves: %w", from, err)
	}
	return token, g.ID, m, nil
}

// PrepareImage grants and resolves the image in from, a directory of one of the worker's pods.
func (w *Worker) PrepareImage(ctx context.Context, from ImageFrom) (*SourceImage, error) {
	name, err := from.Name()
	if err != nil {
		return nil, err
	}
	src := w.Get(from.Pod)
	if src == nil || src.Status.PodIP == "" {
		return nil, fmt.Errorf("k8s: image source pod %s of worker %s has no IP (%s)", from.Pod, w.worker, ProgressOf(src))
	}
	zero := "sha256:" + strings.Repeat("0", 64)
	if _, err := ImageReference(w.images.port, from.Pod, src.Status.PodIP, name, zero); err != nil {
		return nil, err
	}
	connect := w.Connect
	if w.images.viaProxy {
		connect = w.ConnectViaProxy
	}
	c, err := connect(ctx, from.Pod)
	if err != nil {
		return nil, err
	}
	token, grantID, m, err := ResolveImage(ctx, c, from, w.images.ttl)
	if err != nil {
		return nil, err
	}
	ref, err := ImageReference(w.images.port, from.Pod, src.Status.PodIP, name, m.Digest)
	if err != nil {
		return nil, err
	}
	pin := ""
	if PodTLS(src) {
		pin = w.Pin(from.Pod)
	}
	return &SourceImage{From: from, Reference: ref, Username: ForwarderUser(pin), Password: token,
		GrantID: grantID}, nil
}

// prepareImages grants and resolves spec.ImageFrom and each of spec.ImageVolumes (a directory named
// twice is granted once), and returns spec naming their references, and the images. A failure
// leaves the grants already made to expire by their ttl.
func (w *Worker) prepareImages(ctx context.Context, spec StepSpec) (StepSpec, []*SourceImage, error) {
	var images []*SourceImage
	get := func(from ImageFrom) (*SourceImage, error) {
		for _, im := range images {
			if im.From == from {
				return im, nil
			}
		}
		im, err := w.PrepareImage(ctx, from)
		if err == nil {
			images = append(images, im)
		}
		return im, err
	}
	if spec.ImageFrom != nil {
		im, err := get(*spec.ImageFrom)
		if err != nil {
			return spec, nil, err
		}
		spec.Image, spec.ImageFrom = im.Reference, nil
	}
	spec.ImageVolumes = slices.Clone(spec.ImageVolumes)
	for i, v := range spec.ImageVolumes {
		im, err := get(v.From)
		if err != nil {
			return spec, nil, err
		}
		spec.ImageVolumes[i].Reference = im.Reference
	}
	return spec, images, nil
}

// createFrom creates spec's pod with the images of spec.ImageFrom and spec.ImageVolumes: its Secret
// first (replacing one an earlier attempt left), then the pod naming it (after its policy when
// hermetic), then the pod as the Secret's owner. A pod that cannot be created takes its Secret with it; an owner that cannot be
// set leaves the Secret to GC.
func (w *Worker) createFrom(ctx context.Context, spec StepSpec) (*corev1.Pod, error) {
	spec, images, err := w.prepareImages(ctx, spec)
	if err != nil {
		return nil, err
	}
	secret, err := PullSecret(w.worker, spec.Name, images...)
	if err != nil {
		return nil, err
	}
	spec.ImagePullSecrets = append(slices.Clone(spec.ImagePullSecrets), secret.Name)
	pod, err := StepPod(spec, w.worker, AuthOf(w.Token(spec.Name), spec.Delivery.TLS()))
	if err != nil {
		return nil, err
	}
	secrets := w.cs.CoreV1().Secrets(w.namespace)
	_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if err = w.deleteSecret(ctx, secret.Name); err == nil {
			_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("k8s: image-pull secret %s: %w", secret.Name, err)
	}
	created, policyErr := w.createPod(ctx, spec, pod)
	if created == nil {
		_ = w.deleteSecret(ctx, secret.Name)
		return nil, policyErr
	}
	_, err = secrets.Patch(ctx, secret.Name, types.MergePatchType, OwnerPatch(created.Name, string(created.UID)),
		metav1.PatchOptions{})
	if err != nil {
		err = fmt.Errorf("k8s: pod %s created, but it cannot own its image-pull secret (GC deletes it "+
			"once the pod is gone): %w", created.Name, err)
	}
	return created, errors.Join(policyErr, err)
}

func (w *Worker) deleteSecret(ctx context.Context, name string) error {
	err := w.cs.CoreV1().Secrets(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// GCImageSecrets deletes the worker's image-pull Secrets whose pod is gone, once at least grace old,
// and returns their names. Their grants are not revoked (their shims may be gone): they expire by
// their ttl. Credentials without rights on secrets (a Role from before images of step pods) make it
// a no-op.
func (w *Worker) GCImageSecrets(ctx context.Context, grace time.Duration) ([]string, error) {
	selector := WorkerLabel + "=" + LabelValue(w.worker) + "," + ImageForLabel
	list, err := w.cs.CoreV1().Secrets(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("k8s: gc: list image-pull secrets: %w", err)
	}
	pods := map[string]bool{}
	for _, p := range w.List() {
		pods[p.Name] = true
	}
	secrets := make([]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		secrets[i] = &list.Items[i]
	}
	chosen := SelectSecretGarbage(secrets, pods, grace, time.Now())
	var errs []error
	for _, name := range chosen {
		if err := w.deleteSecret(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("k8s: gc: delete secret %s: %w", name, err))
		}
	}
	return chosen, errors.Join(errs...)
}
