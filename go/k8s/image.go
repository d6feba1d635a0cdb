// Images from step pods, the pure part, as the Rust controller's image.rs: a step's directory
// POD:/PATH becomes the image of a later step's pod or an image volume of it, pulled by the kubelet
// through the node-local forwarder on 127.0.0.1 from the source pod's shim. Here: ImageFrom,
// ImageVolume and the image's name (the directory's last component, an OCI name component), the
// reference a pod names (127.0.0.1:<port>/<source IP>/<name>@<digest>), the forwarder's credentials
// in a kubernetes.io/dockerconfigjson Secret (an entry per image repository) labelled for GC, the
// owner reference that lets Kubernetes
// delete it with the pod, and the rule by which GC picks the Secrets whose pod is gone. The I/O is
// in image_worker.go.

package k8s

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// DefaultForwarderPort is the node-local forwarder's port on 127.0.0.1.
	DefaultForwarderPort = 7779
	// DefaultImageGrantTTL is how long a grant for an image lasts: the kubelet pulls within it.
	DefaultImageGrantTTL = time.Hour
	// ImageForLabel is the label (the pod's name as a label value) and annotation (its exact name)
	// of an image-pull Secret: GC selects on the label and reads the pod from the annotation.
	ImageForLabel = "stepshim.dev/image-for"
	// PlainUser is the forwarder's username for a source shim serving plain HTTP; a TLS source is
	// "tls-" and its pin in hex.
	PlainUser = "plain"
)

// ImageFrom names a directory of another step pod of the worker holding an image: an OCI image
// layout, or Concourse's rootfs/ and metadata.json. The image is named after the directory.
type ImageFrom struct {
	// Pod is the source pod, one of the worker's.
	Pod string
	// Path is the directory in it, absolute.
	Path string
}

// ParseImageFrom reads "POD:/PATH".
func ParseImageFrom(s string) (ImageFrom, error) {
	pod, path, ok := strings.Cut(s, ":")
	path = strings.TrimRight(path, "/")
	if !ok || pod == "" || strings.Contains(pod, "/") || !strings.HasPrefix(path, "/") {
		return ImageFrom{}, fmt.Errorf("k8s: image from %q: want POD:/PATH (an absolute path in the pod)", s)
	}
	return ImageFrom{Pod: pod, Path: path}, nil
}

func (f ImageFrom) String() string { return f.Pod + ":" + f.Path }

// ImageVolume is the image in a directory of another step pod of the worker, mounted read-only at
// MountPath of the step's main container (a Kubernetes image volume, volumes[].image).
type ImageVolume struct {
	// From is where the image is.
	From ImageFrom
	// MountPath is where the main container sees its files, absolute.
	MountPath string
	// Reference is the image's reference: Worker.Create resolves From into it. Set it yourself only
	// to call StepPod directly.
	Reference string
}

// ParseImageVolume reads "POD:/PATH=/MOUNT".
func ParseImageVolume(s string) (ImageVolume, error) {
	i := strings.LastIndex(s, "=")
	bad := fmt.Errorf("k8s: image volume %q: want POD:/PATH=/MOUNT (absolute paths, MOUNT not /)", s)
	if i < 0 {
		return ImageVolume{}, bad
	}
	from, err := ParseImageFrom(s[:i])
	mount := strings.TrimRight(s[i+1:], "/")
	if err != nil || !strings.HasPrefix(mount, "/") {
		return ImageVolume{}, bad
	}
	return ImageVolume{From: from, MountPath: mount}, nil
}

// ImageVolumeName is the name of the volume of StepSpec.ImageVolumes[i].
func ImageVolumeName(i int) string { return fmt.Sprintf("image-%d", i) }

var nameComponent = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)

// ValidNameComponent says whether s is an OCI name component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*.
func ValidNameComponent(s string) bool { return nameComponent.MatchString(s) }

// Name is the image's name: the directory's last component, which must be an OCI name component.
func (f ImageFrom) Name() (string, error) {
	p := strings.TrimRight(f.Path, "/")
	name := p[strings.LastIndex(p, "/")+1:]
	if !ValidNameComponent(name) {
		return "", fmt.Errorf("k8s: %s: the image would be named %q, which is not an OCI name component "+
			"(lowercase letters and digits, joined by '.', '_', '__' or '-'); rename the directory", f.Path, name)
	}
	return name, nil
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ImageReference is the reference a consuming pod names: 127.0.0.1:<port>/<ip>/<name>@<digest>. The
// source pod's IP must be IPv4 (an IPv6 address is no OCI name component).
func ImageReference(port int, pod, ip, name, digest string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return "", fmt.Errorf("k8s: pod %s has the address %s, which an image reference cannot name (IPv4 pods only)", pod, ip)
	}
	if !sha256Digest.MatchString(digest) {
		return "", fmt.Errorf("k8s: %q is not a sha256 digest", digest)
	}
	return fmt.Sprintf("127.0.0.1:%d/%s/%s@%s", port, a, name, digest), nil
}

// ForwarderUser is the username the forwarder takes for a source with TLS pin pin (hex), or PlainUser
// for pin "" (a plain HTTP source).
func ForwarderUser(pin string) string {
	if pin == "" {
		return PlainUser
	}
	return "tls-" + pin
}

// ImageRepository is what precedes reference's @<digest>: 127.0.0.1:<port>/<ip>/<name>. The kubelet
// picks a pull Secret's entries for an image by the keys that are a prefix of its repository,
// longest first, so an entry under this key serves this image alone.
func ImageRepository(reference string) string {
	repo, _, _ := strings.Cut(reference, "@")
	return repo
}

// DockerConfigJSON is the .dockerconfigjson the kubelet reads, an entry per image keyed by its
// repository: {"auths":{"127.0.0.1:<port>/<ip>/<name>":{"username":..,"password":..,
// "auth":base64(user:pass)}}}. Each image gets its own credentials at the kubelet's first try. Two
// images of one repository (one pod, two directories of one name) must share their credentials.
func DockerConfigJSON(images ...*SourceImage) ([]byte, error) {
	type auth struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	auths := map[string]auth{}
	for _, im := range images {
		repo := ImageRepository(im.Reference)
		a := auth{im.Username, im.Password, base64.StdEncoding.EncodeToString([]byte(im.Username + ":" + im.Password))}
		if old, ok := auths[repo]; ok && old != a {
			return nil, fmt.Errorf("k8s: two images named %s (the same pod and directory name, other directories): "+
				"rename one directory", repo)
		}
		auths[repo] = a
	}
	return json.Marshal(struct {
		Auths map[string]auth `json:"auths"`
	}{auths})
}

// PullSecretName is the name of pod's image-pull Secret.
func PullSecretName(pod string) string { return pod + "-image" }

// PullSecret is the image-pull Secret of pod of worker: the forwarder's credentials for each of
// images (Reference, Username and Password), labelled for GC.
func PullSecret(worker, pod string, images ...*SourceImage) (*corev1.Secret, error) {
	config, err := DockerConfigJSON(images...)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        PullSecretName(pod),
			Labels:      map[string]string{WorkerLabel: LabelValue(worker), ImageForLabel: LabelValue(pod)},
			Annotations: map[string]string{ImageForLabel: pod},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: config},
	}, nil
}

// OwnerPatch is the merge patch making pod (of uid) the owner of a Secret: Kubernetes' garbage
// collector deletes the Secret once the pod is gone.
func OwnerPatch(pod, uid string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]string{
		{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
	}}})
	return b
}

// SelectSecretGarbage is the names of the image-pull Secrets to delete at now: not already being
// deleted, at least grace old (the pod may be being created), and naming a pod not in pods. Pure,
// so the rule is tested apart from the cluster.
func SelectSecretGarbage(secrets []*corev1.Secret, pods map[string]bool, grace time.Duration, now time.Time) []string {
	metas := make([]*metav1.ObjectMeta, len(secrets))
	for i, s := range secrets {
		metas[i] = &s.ObjectMeta
	}
	return selectObjects(metas, func(m *metav1.ObjectMeta) (string, bool) {
		if pod, ok := m.Annotations[ImageForLabel]; ok {
			return pod, true
		}
		pod, ok := m.Labels[ImageForLabel]
		return pod, ok
	}, pods, grace, now)
}
