// Tests of images from step pods: the pure rules (names, references, the Secret as the kubelet
// reads it, GC's choice), the Secret against the golden file the Rust controller also checks, and
// Worker.Create with ImageFrom against the real shim binary (STEPSHIM_BIN, else the cargo debug
// build) and a fake clientset: grant, digest, Secret, pod, owner, and GC of a Secret left behind.

package k8s

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"stepshim.dev/go/internal/shimtest"
)

func TestImageFromNamesAndReferences(t *testing.T) {
	f, err := ParseImageFrom("build-1:/tmp/build/out/my-image/")
	if err != nil || f.Pod != "build-1" || f.Path != "/tmp/build/out/my-image" {
		t.Fatalf("%+v %v", f, err)
	}
	if n, err := f.Name(); n != "my-image" || err != nil {
		t.Errorf("name %q %v", n, err)
	}
	for _, bad := range []string{"build-1", "p:rel", ":/x", "a/b:/x", "p:/"} {
		if _, err := ParseImageFrom(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, ok := range []string{"a", "0", "a.b", "a__b", "a---b", "v1.2.3"} {
		if !ValidNameComponent(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "A", "a_", "a___b", "a..b", "-a", "a b", "a:b", "a._b", "é"} {
		if ValidNameComponent(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := (ImageFrom{Pod: "p", Path: "/out/My_Image"}).Name(); err == nil || !strings.Contains(err.Error(), `"My_Image"`) {
		t.Errorf("an invalid name: %v", err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	if r, err := ImageReference(7779, "p", "10.244.0.17", "out", digest); err != nil || r != "127.0.0.1:7779/10.244.0.17/out@"+digest {
		t.Errorf("%s %v", r, err)
	}
	if _, err := ImageReference(7779, "p", "fd00::1", "out", digest); err == nil || !strings.Contains(err.Error(), "IPv4 pods only") {
		t.Errorf("IPv6: %v", err)
	}
	if _, err := ImageReference(7779, "p", "10.0.0.1", "out", "sha256:"+strings.Repeat("AB", 32)); err == nil {
		t.Error("an uppercase digest was taken")
	}
}

// kubeletAuth reads a .dockerconfigjson as the kubelet does (credentialprovider.DockerConfigEntry):
// the auth field, when present, decoded into username and password.
func kubeletAuth(t *testing.T, config []byte, host string) (user, pass string) {
	t.Helper()
	var c struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	e, ok := c.Auths[host]
	if !ok {
		t.Fatalf("no entry for %s in %s", host, config)
	}
	raw, err := base64.StdEncoding.DecodeString(e.Auth)
	if err != nil {
		t.Fatal(err)
	}
	user, pass, _ = strings.Cut(string(raw), ":")
	if user != e.Username || pass != e.Password {
		t.Errorf("auth says %s:%s, the fields %s:%s", user, pass, e.Username, e.Password)
	}
	return user, pass
}

func digestOf(b string) string { return "sha256:" + strings.Repeat(b, 32) }

func TestDockerConfigIsWhatTheKubeletReads(t *testing.T) {
	token := strings.Repeat("00", 32)
	img := &SourceImage{Reference: "127.0.0.1:7779/10.244.0.17/img@" + digestOf("ab"), Username: PlainUser, Password: token}
	b, err := DockerConfigJSON(img)
	auth := base64.StdEncoding.EncodeToString([]byte("plain:" + token))
	want := `{"auths":{"127.0.0.1:7779/10.244.0.17/img":{"username":"plain","password":"` + token + `","auth":"` + auth + `"}}}`
	if err != nil || string(b) != want {
		t.Errorf("got  %s (%v)\nwant %s", b, err, want)
	}
	pin := strings.Repeat("1f", 32)
	tls := &SourceImage{Reference: "127.0.0.1:7000/10.0.0.1/a.b@" + digestOf("cd"), Username: ForwarderUser(pin), Password: token}
	b, _ = DockerConfigJSON(tls)
	if u, p := kubeletAuth(t, b, "127.0.0.1:7000/10.0.0.1/a.b"); u != "tls-"+pin || p != token {
		t.Errorf("%s %s", u, p)
	}
	// Several images: an entry each, keyed by repository; one image twice is one entry.
	tools := &SourceImage{Reference: "127.0.0.1:7779/10.244.0.18/tools@" + digestOf("ef"), Username: PlainUser, Password: "tb"}
	b, err = DockerConfigJSON(img, tools, img)
	want = `{"auths":{"127.0.0.1:7779/10.244.0.17/img":{"username":"plain","password":"` + token + `","auth":"` + auth +
		`"},"127.0.0.1:7779/10.244.0.18/tools":{"username":"plain","password":"tb","auth":"` +
		base64.StdEncoding.EncodeToString([]byte("plain:tb")) + `"}}}`
	if err != nil || string(b) != want {
		t.Errorf("got  %s (%v)\nwant %s", b, err, want)
	}
	// One repository, two grants: the kubelet could not tell them apart.
	again := &SourceImage{Reference: "127.0.0.1:7779/10.244.0.17/img@" + digestOf("12"), Username: PlainUser, Password: "other"}
	if _, err := DockerConfigJSON(img, again); err == nil || !strings.Contains(err.Error(), "127.0.0.1:7779/10.244.0.17/img") {
		t.Errorf("a clash: %v", err)
	}
	var patch any
	_ = json.Unmarshal(OwnerPatch("step-2", "1234-uid"), &patch)
	b, _ = json.Marshal(patch)
	if string(b) != `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"step-2","uid":"1234-uid"}]}}` {
		t.Errorf("owner patch %s", b)
	}
}

func TestImageVolumesAreMountedReadOnly(t *testing.T) {
	v, err := ParseImageVolume("make:/build/img/=/img/")
	if err != nil || v.From != (ImageFrom{Pod: "make", Path: "/build/img"}) || v.MountPath != "/img" {
		t.Errorf("%+v %v", v, err)
	}
	for _, bad := range []string{"make:/build/img", "make:/build/img=", "make:/build/img=/", "make:/b=rel", "make=/img"} {
		if _, err := ParseImageVolume(bad); err == nil || !strings.Contains(err.Error(), "POD:/PATH=/MOUNT") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	ref := "127.0.0.1:7779/10.244.0.9/tools@" + digestOf("0f")
	spec := StepSpec{Name: "c", Image: "busybox", Delivery: FromConfigMap("c"),
		ImageVolumes: []ImageVolume{{MountPath: "/tools", Reference: ref}}}
	b, _ := json.Marshal(mustStepPod(t, spec, "w", AuthOf("t", false)).Spec)
	for _, want := range []string{
		`{"name":"image-0","image":{"reference":"` + ref + `","pullPolicy":"IfNotPresent"}}`,
		`{"name":"image-0","readOnly":true,"mountPath":"/tools"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in %s", want, b)
		}
	}
	for _, mount := range []string{"rel", "/"} {
		bad := spec
		bad.ImageVolumes = []ImageVolume{{MountPath: mount, Reference: ref}}
		if bad.Validate() == nil {
			t.Errorf("mount %q taken", mount)
		}
	}
	bad := spec
	bad.ImageVolumes = append(slices.Clone(spec.ImageVolumes), spec.ImageVolumes[0])
	if bad.Validate() == nil {
		t.Error("two volumes at one path taken")
	}
}

func TestImagePullSecretMatchesTheGoldenFile(t *testing.T) {
	var g struct {
		Worker, Pod string
		Images      []struct{ Reference, Pin, Token string }
		Secret      any
	}
	testdata(t, "imagepull-secret.json", &g)
	var images []*SourceImage
	for _, im := range g.Images {
		images = append(images, &SourceImage{Reference: im.Reference, Username: ForwarderUser(im.Pin), Password: im.Token})
	}
	secret, err := PullSecret(g.Worker, g.Pod, images...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	_ = json.Unmarshal(b, &got)
	// Go writes the empty creationTimestamp of a non-pointer ObjectMeta field; Rust leaves it out.
	delete(got.(map[string]any)["metadata"].(map[string]any), "creationTimestamp")
	var out []string
	diff("secret", g.Secret, got, &out)
	if len(out) > 0 {
		t.Errorf("imagepull-secret.json:\n%s", strings.Join(out, "\n"))
	}
}

func secretFor(name, pod string, created time.Time, deleting bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	if pod != "" {
		s.Annotations = map[string]string{ImageForLabel: pod}
	}
	if deleting {
		s.DeletionTimestamp = &metav1.Time{Time: created}
	}
	return s
}

func TestGCSelectsTheSecretsWhosePodIsGone(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	old, young := now.Add(-10*time.Minute), now.Add(-30*time.Second)
	secrets := []*corev1.Secret{
		secretFor("live-image", "live", old, false),
		secretFor("gone-image", "gone", old, false),
		secretFor("young-image", "young", young, false),
		secretFor("going-image", "going", old, true),
		secretFor("unnamed", "", old, false),
	}
	got := SelectSecretGarbage(secrets, map[string]bool{"live": true}, time.Minute, now)
	if strings.Join(got, ",") != "gone-image" {
		t.Errorf("got %v", got)
	}
	if got := SelectSecretGarbage(secrets, nil, 0, now); strings.Join(got, ",") != "live-image,gone-image,young-image" {
		t.Errorf("no grace: %v", got)
	}
}

// realShim runs the stepshim binary on 127.0.0.1 accepting token until the test ends; it returns
// the port.
func realShim(t *testing.T, token string) int {
	t.Helper()
	p, err := shimtest.Start(t, token, shimtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCreateWithImageFromAStepPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := fake.NewClientset()
	w := handWorker(t, cs, 0)
	port := realShim(t, w.Token("src"))
	plain, _ := InitContainer("shim").WithTLS(TLSOff)
	w = handWorker(t, cs, port, podAt(w, "src", "127.0.0.1", plain))
	w.images = settingsOf(Config{ForwarderPort: 7000, ImageGrantTTL: 10 * time.Minute})

	dir := filepath.Join(t.TempDir(), "app-image")
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "rootfs", "bin", "x"), []byte("x"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "metadata.json"), []byte(`{"cmd":["/bin/x"]}`), 0o644)

	spec := StepSpec{Name: "consumer", ImageFrom: &ImageFrom{Pod: "src", Path: dir}, Delivery: FromConfigMap("c")}
	pod, err := w.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ref := pod.Spec.Containers[0].Image
	if !strings.HasPrefix(ref, "127.0.0.1:7000/127.0.0.1/app-image@sha256:") || len(ref) != len("127.0.0.1:7000/127.0.0.1/app-image@sha256:")+64 {
		t.Errorf("image %s", ref)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "consumer-image" {
		t.Errorf("pull secrets %v", pod.Spec.ImagePullSecrets)
	}
	secret, err := cs.CoreV1().Secrets("steps").Get(ctx, "consumer-image", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeDockerConfigJson || secret.Labels[ImageForLabel] != "consumer" {
		t.Errorf("secret %+v", secret.ObjectMeta)
	}
	user, token := kubeletAuth(t, secret.Data[corev1.DockerConfigJsonKey], ImageRepository(ref))
	if user != PlainUser || len(token) != 64 || token == w.Token("src") {
		t.Errorf("credentials %s %q: want plain and a grant token", user, token)
	}
	if o := secret.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].Name != "consumer" {
		t.Errorf("owners %+v", o)
	}
	// The grant behind the token serves the image the reference pins.
	c, err := w.Connect(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.WithGrantToken(token).ImageManifest(ctx, "app-image", "latest")
	if err != nil || !strings.HasSuffix(ref, "@"+m.Digest) {
		t.Errorf("the grant resolves %+v %v; reference %s", m, err, ref)
	}

	// The same image as the step's and as a volume, another as a second volume: one grant for the
	// first, an entry per repository in the one Secret, the volumes mounted read-only.
	other := filepath.Join(t.TempDir(), "tools")
	if err := os.CopyFS(other, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	both := StepSpec{Name: "both", ImageFrom: &ImageFrom{Pod: "src", Path: dir}, Delivery: FromConfigMap("c"),
		ImageVolumes: []ImageVolume{{From: ImageFrom{Pod: "src", Path: dir}, MountPath: "/app"},
			{From: ImageFrom{Pod: "src", Path: other}, MountPath: "/tools"}}}
	bpod, err := w.Create(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	vols := bpod.Spec.Volumes[1:]
	if len(vols) != 2 || vols[0].Name != "image-0" || vols[0].Image.Reference != bpod.Spec.Containers[0].Image ||
		vols[0].Image.PullPolicy != corev1.PullIfNotPresent ||
		!strings.HasPrefix(vols[1].Image.Reference, "127.0.0.1:7000/127.0.0.1/tools@sha256:") {
		t.Errorf("volumes %+v", vols)
	}
	if m := bpod.Spec.Containers[0].VolumeMounts; len(m) != 3 || m[2] != (corev1.VolumeMount{Name: "image-1", MountPath: "/tools", ReadOnly: true}) {
		t.Errorf("mounts %+v", m)
	}
	bsecret, err := cs.CoreV1().Secrets("steps").Get(ctx, "both-image", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, appToken := kubeletAuth(t, bsecret.Data[corev1.DockerConfigJsonKey], ImageRepository(vols[0].Image.Reference))
	_, toolsToken := kubeletAuth(t, bsecret.Data[corev1.DockerConfigJsonKey], ImageRepository(vols[1].Image.Reference))
	if m, err := c.WithGrantToken(toolsToken).ImageManifest(ctx, "tools", "latest"); err != nil ||
		!strings.HasSuffix(vols[1].Image.Reference, "@"+m.Digest) || appToken == toolsToken {
		t.Errorf("the tools grant resolves %+v %v", m, err)
	}
	if len(bpod.Spec.ImagePullSecrets) != 1 {
		t.Errorf("pull secrets %v", bpod.Spec.ImagePullSecrets)
	}

	// A directory that is no image: the shim's refusal, no Secret, no pod.
	bad := StepSpec{Name: "bad", ImageFrom: &ImageFrom{Pod: "src", Path: t.TempDir()}, Delivery: FromConfigMap("c")}
	if _, err := w.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "is not an image") {
		t.Errorf("not an image: %v", err)
	}
	if _, err := cs.CoreV1().Secrets("steps").Get(ctx, "bad-image", metav1.GetOptions{}); err == nil {
		t.Error("a Secret for a pod never created")
	}

	// GC: a Secret whose pod is gone goes; the consumer's stays (its pod is in the cache).
	w = handWorker(t, cs, port, podAt(w, "src", "127.0.0.1", plain), pod, bpod)
	orphan, _ := PullSecret("w", "gone", &SourceImage{Reference: "127.0.0.1:7000/10.0.0.1/x", Username: PlainUser, Password: "t"})
	orphan.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	if _, err := cs.CoreV1().Secrets("steps").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := w.GCImageSecrets(ctx, time.Minute)
	if err != nil || strings.Join(got, ",") != "gone-image" {
		t.Errorf("gc chose %v (%v)", got, err)
	}
}
