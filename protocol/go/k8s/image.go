// Images from step pods, the pure part, as the Rust controller's image.rs: a step's directory
// POD:/PATH becomes the image of a later step's pod, pulled by the kubelet through the node-local
// forwarder on 127.0.0.1 from the source pod's shim. Here: ImageFrom and the image's name (the
// directory's last component, an OCI name component), the reference a pod names
// (127.0.0.1:<port>/<source IP>/<name>@<digest>), the forwarder's credentials in a
// kubernetes.io/dockerconfigjson Secret labelled for GC, the owner reference that lets Kubernetes
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

// DockerConfigJSON is the .dockerconfigjson the kubelet reads:
// {"auths":{"127.0.0.1:<port>":{"username":..,"password":..,"auth":base64(user:pass)}}}.
func DockerConfigJSON(port int, username, password string) []byte {
	type auth struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	b, _ := json.Marshal(struct {
		Auths map[string]auth `json:"auths"`
	}{map[string]auth{fmt.Sprintf("127.0.0.1:%d", port): {
		username, password, base64.StdEncoding.EncodeToString([]byte(username + ":" + password)),
	}}})
	return b
}

// PullSecretName is the name of pod's image-pull Secret.
func PullSecretName(pod string) string { return pod + "-image" }

// PullSecret is the image-pull Secret of pod of worker: the forwarder's credentials, labelled for GC.
func PullSecret(worker, pod string, port int, username, password string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        PullSecretName(pod),
			Labels:      map[string]string{WorkerLabel: LabelValue(worker), ImageForLabel: LabelValue(pod)},
			Annotations: map[string]string{ImageForLabel: pod},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: DockerConfigJSON(port, username, password)},
	}
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
	var out []string
	for _, s := range secrets {
		pod, ok := s.Annotations[ImageForLabel]
		if !ok {
			pod, ok = s.Labels[ImageForLabel]
		}
		if !ok || s.DeletionTimestamp != nil || pods[pod] {
			continue
		}
		age := time.Duration(0)
		if !s.CreationTimestamp.IsZero() {
			age = max(now.Sub(s.CreationTimestamp.Time), 0)
		}
		if age >= grace {
			out = append(out, s.Name)
		}
	}
	return out
}
