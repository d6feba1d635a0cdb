// The step pod: the user's image with stepshim as PID 1 of its main container, the shim delivered by
// an init container (copying it out of the shim image into an emptyDir, the TLS build by default) or
// by a ConfigMap (the plain build), a readiness probe (/healthz, a TCP connection for a TLS shim), and the pod's
// labels, resources and security settings. It must stay the same pod as the Rust controller's
// podspec::build_pod; golden_test.go and controller/tests/golden.rs compare both to
// protocol/testdata/steppod-*.json.

package k8s

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names shared with the shim and the Rust controller (protocol/src/settings.rs, PROTOCOL.md section 7).
const (
	// WorkerLabel is the label every pod of a worker carries; the informer and GC select on it.
	WorkerLabel = "org.concourse-ci.worker"
	// BuildLabel is the label and annotation naming the build.
	BuildLabel = "org.concourse-ci.build"
	// StepLabel is the label and annotation naming the step.
	StepLabel = "org.concourse-ci.step"
	// ShimPort is the port the shim serves on inside the pod.
	ShimPort = 7777
	// ShimDir is where the shim binary is mounted in the main container.
	ShimDir = "/.stepshim"
	// ConfigMapKey is the key of the shim binary in the shim ConfigMap.
	ConfigMapKey = "stepshim"
	// EnvTokenSHA256 carries the hex SHA-256 of the pod's bearer token.
	EnvTokenSHA256 = "STEPSHIM_TOKEN_SHA256"
	// EnvListen is the shim's listen address.
	EnvListen = "STEPSHIM_LISTEN"
	// EnvTLSSeed carries the hex seed of the shim's TLS key (PROTOCOL.md 1.1); a pod's shim serves TLS
	// iff its main container has it.
	EnvTLSSeed = "STEPSHIM_TLS_SEED"
	// ProbePath is the shim's unauthenticated liveness route, used by the readiness probe.
	ProbePath = "/healthz"
	// MainContainer is the name of the container whose PID 1 is the shim.
	MainContainer = "step"
	// PlainBinary and TLSBinary are the shim image's two builds: plain HTTP, and TLS.
	PlainBinary = "/stepshim"
	TLSBinary   = "/stepshim-tls"
	// CertsDir is where StepSpec.CertsConfigMap is mounted, read-only, in the main container.
	CertsDir = "/etc/ssl/certs"
	// CertsVolume is the name of that volume.
	CertsVolume = "certs"
)

// Delivery says how the shim binary reaches the main container, and whether it serves TLS. Build one
// with InitContainer or FromConfigMap (then WithTLS); the zero value is invalid.
type Delivery struct {
	initImage string
	configMap string
	tls       bool
}

// InitContainer delivers the shim by an init container from image (FROM scratch plus /stepshim and
// /stepshim-tls) running "/stepshim-tls install" into an emptyDir: the shim serves TLS. For an image
// without /stepshim-tls (older releases), turn TLS off with WithTLS(TLSOff).
func InitContainer(image string) Delivery { return Delivery{initImage: image, tls: true} }

// FromConfigMap delivers the shim from the ConfigMap name holding the binary under the key "stepshim"
// (see `stepctl manifests --shim-configmap`). That is the small plain build: the shim serves HTTP.
func FromConfigMap(name string) Delivery { return Delivery{configMap: name} }

// String names the delivery as a log line would.
func (d Delivery) String() string {
	if d.configMap != "" {
		return "configmap " + d.configMap
	}
	if !d.tls {
		return "init container " + d.initImage + " (plain HTTP)"
	}
	return "init container " + d.initImage
}

// EnvVar is one environment variable of the main container; order is kept.
type EnvVar struct {
	Name, Value string
}

// StepSpec describes a step pod. Zero values are the defaults: no build or step labels, no resources,
// the image's user, unprivileged, no service account and no token mounted, IfNotPresent.
type StepSpec struct {
	// Name is the pod name (a DNS label).
	Name string
	// Image is the step's image.
	Image string
	// Build and Step name the build and step owning the pod; empty means none.
	Build, Step string
	// Env is the main container's environment; every process the shim spawns inherits it.
	Env []EnvVar
	// CPU and Memory are both the request and the limit (e.g. "500m", "1Gi"); empty means none.
	CPU, Memory string
	// CPURequest is a CPU request without a limit (e.g. "100m"): a weight against the node's other
	// pods (cgroup cpu.shares/cpu.weight in proportion), never a cap, as Garden's CPU shares. It
	// and CPU exclude each other.
	CPURequest string
	// Hermetic cuts the pod off the network: Worker.Create first creates a NetworkPolicy (the pod's
	// own, HermeticPolicy, which the pod then owns) denying all egress but to the shim port of the
	// worker's own pods (pulls of inputs), DNS included. Ingress is not restricted by it. Needs a
	// network plugin that enforces NetworkPolicy; the name must be a label value (63 characters).
	Hermetic bool
	// CertsConfigMap names a ConfigMap mounted read-only at /etc/ssl/certs of the main container in
	// place of the image's directory (the worker's CA bundle, as Garden's CertsBindMount).
	CertsConfigMap string
	// RunAsUser and RunAsGroup set the main container's ids (the shim's and, by default, every
	// process's); nil keeps the image's.
	RunAsUser, RunAsGroup *int64
	// Privileged makes the main container privileged.
	Privileged bool
	// NodeSelector and Tolerations place the pod.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// PreferredNodes are nodes the scheduler should prefer, first the most (where the step's
	// inputs, caches or image already are): a preference, never a requirement, so the pod runs
	// elsewhere rather than wait. Empty: none.
	PreferredNodes []string
	// PreferredWeights are the weights (1 to 100) of PreferredNodes, one each; empty: 100 for the
	// first and one less for each next.
	PreferredWeights []int32
	// BuildAffinity, 1 to 100, prefers the nodes where pods of the same Build of this worker
	// already run, with that weight (a preferred pod affinity): a build's steps gather where its
	// artifacts are. 0, or no Build: none.
	BuildAffinity int32
	// ServiceAccount is the pod's service account, if the step needs one.
	ServiceAccount string
	// AutomountServiceAccountToken mounts the service account token (off by default: steps should not
	// talk to the cluster).
	AutomountServiceAccountToken bool
	// ImagePullPolicy of the step image; empty means IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets name Secrets of registry credentials for the step image and image volumes.
	ImagePullSecrets []string
	// ImageFrom, when set, makes the step's image a directory of another step pod of the worker
	// (Worker.Create grants, resolves and names it, see image.go); Image is then left empty.
	ImageFrom *ImageFrom
	// ImageVolumes are images of other step pods of the worker mounted read-only into the main
	// container, as volumes image-0, image-1, ... (Worker.Create grants and resolves them, with one
	// image-pull Secret for the pod, see image.go).
	ImageVolumes []ImageVolume
	// Claims are PersistentVolumeClaims of the pod's namespace mounted read-write into the main
	// container, as volumes claim-0, claim-1, ... (claim.go): what the step writes there outlives
	// the pod.
	Claims []ClaimMount
	// Delivery says how the shim reaches the pod.
	Delivery Delivery
}

// LabelValue makes a label value of free text: at most 63 characters of [A-Za-z0-9._-] (others become
// '_'), alphanumeric at both ends.
func LabelValue(s string) string {
	var b strings.Builder
	n := 0
	for _, c := range s {
		if n == 63 {
			break
		}
		n++
		if c < 0x80 && (isAlnum(byte(c)) || c == '.' || c == '_' || c == '-') {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return strings.TrimFunc(b.String(), func(c rune) bool { return c >= 0x80 || !isAlnum(byte(c)) })
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Validate reports what StepPod refuses or the apiserver would refuse outright: no name,
// no image, no delivery, a CPU or memory quantity that does not parse, CPU with CPURequest, a
// hermetic pod whose name is not a label value, a claim whose name is not a DNS subdomain, or a
// mount path that is not absolute, is "/", or is taken twice (or by the shim's own directory).
func (s StepSpec) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("k8s: step spec without a pod name")
	case s.Image == "" && s.ImageFrom == nil:
		return fmt.Errorf("k8s: step spec %s without an image", s.Name)
	case s.Image != "" && s.ImageFrom != nil:
		return fmt.Errorf("k8s: step spec %s with both an image and ImageFrom", s.Name)
	case s.Delivery.initImage == "" && s.Delivery.configMap == "":
		return fmt.Errorf("k8s: step spec %s without a shim delivery (use InitContainer or FromConfigMap)", s.Name)
	case s.Delivery.tls && s.Delivery.configMap != "":
		return fmt.Errorf("k8s: step spec %s: %w", s.Name, errConfigMapTLS)
	case s.CPU != "" && s.CPURequest != "":
		return fmt.Errorf("k8s: step spec %s: CPU (request and limit) and CPURequest (request only) exclude each other", s.Name)
	case s.Hermetic && LabelValue(s.Name) != s.Name:
		return fmt.Errorf("k8s: step spec %s: a hermetic pod's name must be a label value (at most 63 characters "+
			"of [A-Za-z0-9._-]), its policy selects it by it", s.Name)
	}
	mounts := map[string]bool{ShimDir: true}
	if s.CertsConfigMap != "" {
		mounts[CertsDir] = true
	}
	for _, v := range s.ImageVolumes {
		if !strings.HasPrefix(v.MountPath, "/") || v.MountPath == "/" || mounts[v.MountPath] {
			return fmt.Errorf("k8s: step spec %s: image volume at %q: want an absolute path, not /, once", s.Name, v.MountPath)
		}
		mounts[v.MountPath] = true
	}
	if err := validateClaims(s.Claims, mounts); err != nil {
		return fmt.Errorf("k8s: step spec %s: %w", s.Name, err)
	}
	for what, q := range map[string]string{"cpu": s.CPU, "cpu request": s.CPURequest, "memory": s.Memory} {
		if _, err := resource.ParseQuantity(q); q != "" && err != nil {
			return fmt.Errorf("k8s: step spec %s: %s %q: %w", s.Name, what, q, err)
		}
	}
	return nil
}

// StepPod is the pod for spec, owned by worker, whose shim accepts the token hashing to
// auth.TokenSHA256 and, when spec.Delivery serves TLS, holds the key of auth.TLSSeed (AuthOf makes
// both of a token). A spec that Validate rejects, or a TLS delivery without a seed, is an error.
func StepPod(spec StepSpec, worker string, auth PodAuth) (*corev1.Pod, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Delivery.tls && auth.TLSSeed == "" {
		return nil, fmt.Errorf("k8s: step pod %s: a TLS delivery without PodAuth.TLSSeed (use AuthOf(token, true))", spec.Name)
	}
	volume, init := delivery(spec.Delivery)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: podMeta(spec, worker),
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(spec.AutomountServiceAccountToken),
			ServiceAccountName:           spec.ServiceAccount,
			// The shim TERMs its processes and waits its own grace (10 s) on SIGTERM.
			TerminationGracePeriodSeconds: ptr(int64(15)),
			EnableServiceLinks:            ptr(false),
			Containers:                    []corev1.Container{mainContainer(spec, auth)},
			Volumes:                       []corev1.Volume{volume},
			SecurityContext:               &corev1.PodSecurityContext{},
		},
	}
	if init != nil {
		pod.Spec.InitContainers = []corev1.Container{*init}
	}
	addVolumes(pod, spec)
	for _, name := range spec.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if len(spec.NodeSelector) > 0 {
		pod.Spec.NodeSelector = spec.NodeSelector
	}
	if len(spec.Tolerations) > 0 {
		pod.Spec.Tolerations = spec.Tolerations
	}
	pod.Spec.Affinity = preferNodes(spec.PreferredNodes, spec.PreferredWeights)
	if spec.Build != "" && spec.BuildAffinity > 0 {
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &corev1.Affinity{}
		}
		pod.Spec.Affinity.PodAffinity = &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: min(spec.BuildAffinity, 100),
			PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{BuildLabel: LabelValue(spec.Build), WorkerLabel: LabelValue(worker)}}},
		}}}
	}
	return pod, nil
}

// preferNodes is a node affinity preferring nodes with weights (1 to 100; without them the first
// 100, then one less for each next, at least 1); nil for none.
func preferNodes(nodes []string, weights []int32) *corev1.Affinity {
	if len(nodes) == 0 {
		return nil
	}
	var terms []corev1.PreferredSchedulingTerm
	for i, n := range nodes {
		w := int32(max(100-i, 1))
		if i < len(weights) {
			w = min(max(weights[i], 1), 100)
		}
		terms = append(terms, corev1.PreferredSchedulingTerm{Weight: w,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}}})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}
}

// podMeta is the step pod's name, its worker's label, and its build and step as labels and
// annotations (a hermetic pod also carries its hermetic label).
func podMeta(spec StepSpec, worker string) metav1.ObjectMeta {
	labels := map[string]string{WorkerLabel: LabelValue(worker)}
	annotations := map[string]string{}
	for _, kv := range [][2]string{{BuildLabel, spec.Build}, {StepLabel, spec.Step}} {
		if kv[1] != "" {
			labels[kv[0]] = LabelValue(kv[1])
			annotations[kv[0]] = kv[1]
		}
	}
	if spec.Hermetic {
		labels[HermeticLabel] = spec.Name
	}
	return metav1.ObjectMeta{Name: spec.Name, Labels: labels, Annotations: annotations}
}

// mainContainer is the step's container: the user's image running the shim as PID 1, with the
// shim's own settings (token hash, TLS seed, listen address) before the step's environment.
func mainContainer(spec StepSpec, auth PodAuth) corev1.Container {
	env := []corev1.EnvVar{{Name: EnvTokenSHA256, Value: auth.TokenSHA256}}
	if spec.Delivery.tls {
		env = append(env, corev1.EnvVar{Name: EnvTLSSeed, Value: auth.TLSSeed})
	}
	env = append(env, corev1.EnvVar{Name: EnvListen, Value: fmt.Sprintf("0.0.0.0:%d", ShimPort)})
	for _, e := range spec.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	pull := spec.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	return corev1.Container{
		Name:            MainContainer,
		Image:           spec.Image,
		ImagePullPolicy: pull,
		Command:         []string{ShimDir + "/stepshim"},
		Env:             env,
		Ports:           []corev1.ContainerPort{{Name: "stepshim", ContainerPort: ShimPort}},
		ReadinessProbe:  readiness(spec.Delivery.tls),
		SecurityContext: &corev1.SecurityContext{
			Privileged: ptr(spec.Privileged),
			RunAsUser:  spec.RunAsUser,
			RunAsGroup: spec.RunAsGroup,
		},
		Resources:    resources(spec.CPU, spec.CPURequest, spec.Memory),
		VolumeMounts: []corev1.VolumeMount{{Name: "stepshim", MountPath: ShimDir, ReadOnly: true}},
	}
}

// addVolumes mounts spec's image volumes, its certificates ConfigMap and its claims into the step
// container, in that order.
func addVolumes(pod *corev1.Pod, spec StepSpec) {
	c := &pod.Spec.Containers[0]
	for i, v := range spec.ImageVolumes {
		name := ImageVolumeName(i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: v.Reference, PullPolicy: corev1.PullIfNotPresent},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: v.MountPath, ReadOnly: true})
	}
	if spec.CertsConfigMap != "" {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: CertsVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: spec.CertsConfigMap}},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: CertsVolume, MountPath: CertsDir, ReadOnly: true})
	}
	addClaims(pod, spec)
}

// delivery is the shim volume and, for init-container delivery, the container filling it.
func delivery(d Delivery) (corev1.Volume, *corev1.Container) {
	switch {
	case d.configMap != "":
		return corev1.Volume{
			Name: "stepshim",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: d.configMap},
				Items:                []corev1.KeyToPath{{Key: ConfigMapKey, Path: "stepshim", Mode: ptr(int32(0o555))}},
				DefaultMode:          ptr(int32(0o555)),
			}},
		}, nil
	case d.initImage != "":
		binary := PlainBinary
		if d.tls {
			binary = TLSBinary
		}
		return corev1.Volume{
				Name:         "stepshim",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}, &corev1.Container{
				Name:            "stepshim-install",
				Image:           d.initImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{binary, "install", ShimDir + "/stepshim"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "stepshim", MountPath: ShimDir}},
			}
	default:
		// Validate refuses a spec without a delivery before StepPod gets here.
		return corev1.Volume{}, nil
	}
}

// resources is requests = limits for cpu and memory, and cpuRequest a request only (Validate has
// checked that they parse and that cpu and cpuRequest are not both set).
func resources(cpu, cpuRequest, memory string) corev1.ResourceRequirements {
	q := corev1.ResourceList{}
	if cpu != "" {
		q[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		q[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	var r corev1.ResourceRequirements
	if len(q) > 0 {
		r = corev1.ResourceRequirements{Requests: q, Limits: q.DeepCopy()}
	}
	if cpuRequest != "" {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceCPU] = resource.MustParse(cpuRequest)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// readiness is the readiness probe, every second: GET /healthz for a plain-HTTP shim; a TCP
// connection for a TLS shim, whose HTTPS probe would cost a full handshake a second (about 1.1 ms of
// CPU between the kubelet and the shim against 0.1 ms, results/tls) and check no certificate
// anyway. The shim listens only once it serves. The kit waits on this probe only through the
// apiserver; otherwise WaitReady asks the shim itself (ready.go).
func readiness(tls bool) *corev1.Probe {
	port := intstr.FromInt32(ShimPort)
	probe := &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 3}
	if tls {
		probe.TCPSocket = &corev1.TCPSocketAction{Port: port}
	} else {
		probe.HTTPGet = &corev1.HTTPGetAction{Path: ProbePath, Port: port}
	}
	return probe
}
