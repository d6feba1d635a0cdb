// Worker: one worker's pods in one namespace, seen through one shared informer filtered by the worker
// label (list once, then watch; client-go relists with backoff after errors such as an apiserver
// restart). Every wait, list and GC reads this cache and wakes on its changes; nothing lists pods per
// tick or polls a pod. Pods are the only API objects it writes, the image-pull Secrets of
// StepSpec.ImageFrom (image_worker.go), the NetworkPolicies of hermetic pods (hermetic.go) and the
// PersistentVolumeClaims a caller asks for (claim.go).

package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"stepshim.dev/go/shim"
)

// Config names a worker.
type Config struct {
	// Namespace of the step pods.
	Namespace string
	// Worker is the worker's name, the value (through LabelValue) of the org.concourse-ci.worker label.
	Worker string
	// Key derives the pods' tokens; a restarted worker with the same key reaches the same shims.
	Key Key
	// SyncTimeout bounds the first list; zero means 30s.
	SyncTimeout time.Duration
	// ForwarderPort is the node-local forwarder's port on 127.0.0.1 that images of step pods are
	// pulled through (StepSpec.ImageFrom); zero means DefaultForwarderPort.
	ForwarderPort int
	// ImageGrantTTL is how long the grant for an image of a step pod lasts; zero means
	// DefaultImageGrantTTL.
	ImageGrantTTL time.Duration
	// ImagesViaProxy reaches the source shims of StepSpec.ImageFrom through the apiserver
	// (ConnectViaProxy) instead of at their pod IPs (Connect).
	ImagesViaProxy bool
	// DialShim, if set, opens the connections to the shims at their pod IPs (to count or trace
	// them, say); nil is the shim client's own dialer.
	DialShim func(ctx context.Context, network, address string) (net.Conn, error)
}

// Worker creates, watches and deletes one worker's step pods and reaches their shims. Methods are safe
// for concurrent use. Close stops the informer.
type Worker struct {
	cs        kubernetes.Interface
	namespace string
	worker    string
	key       Key
	// port is where shims serve at their pod IPs: ShimPort, another port only in tests.
	port int
	// images is how images of step pods are granted and named (Config's settings).
	images imageSettings
	// dialShim is Config.DialShim.
	dialShim  func(ctx context.Context, network, address string) (net.Conn, error)
	factory   informers.SharedInformerFactory
	lister    listersv1.PodNamespaceLister
	stop      chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// changed is closed (and replaced) at every event the informer delivers: the waiters' wake-up.
	changed chan struct{}
	// watchErr is the informer's last list or watch error, for a clearer sync timeout.
	watchErr error
	// checked holds the UIDs of pods whose shim passed shim.CheckProtocol: asked once per pod.
	checked sync.Map
	// contacts holds, by pod UID, when the pod's shim last answered a client of this Worker
	// (contact.go).
	contacts sync.Map
	// departed keeps the last state of deleted pods (contact.go).
	departed departed
}

// Clientset builds a Kubernetes client from a kubeconfig file; an empty path loads the usual way
// ($KUBECONFIG, ~/.kube/config, then the in-cluster service account).
func Clientset(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("k8s: kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// NewWorker starts the worker's informer and returns once its first list is in the cache, or an error
// if it is not within cfg.SyncTimeout or ctx (apiserver down, no list/watch right on pods, ...). ctx
// bounds only that start; the informer runs, and re-lists by itself after errors, until Close.
func NewWorker(ctx context.Context, cs kubernetes.Interface, cfg Config) (*Worker, error) {
	if cfg.Namespace == "" || LabelValue(cfg.Worker) == "" {
		return nil, errors.New("k8s: worker config needs a namespace and a worker name")
	}
	if len(cfg.Key.b) < MinKeyLen {
		return nil, errors.New("k8s: worker config without a key (NewKey, KeyFromFile)")
	}
	selector := labels.Set{WorkerLabel: LabelValue(cfg.Worker)}.String()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	pods := factory.Core().V1().Pods()
	w := &Worker{
		cs: cs, namespace: cfg.Namespace, worker: cfg.Worker, key: cfg.Key, port: ShimPort, factory: factory,
		images: settingsOf(cfg), dialShim: cfg.DialShim,
		lister: pods.Lister().Pods(cfg.Namespace), stop: make(chan struct{}), changed: make(chan struct{}),
	}
	informer := pods.Informer()
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.mu.Lock()
		w.watchErr = err
		w.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify() },
		UpdateFunc: func(any, any) { w.notify() },
		DeleteFunc: func(obj any) { w.forgetContact(obj); w.notify() },
	}); err != nil {
		return nil, fmt.Errorf("k8s: pod informer: %w", err)
	}
	factory.Start(w.stop)
	timeout := cfg.SyncTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		w.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		return nil, fmt.Errorf("k8s: could not list pods in %s within %v: %w", cfg.Namespace, timeout,
			errors.Join(syncCtx.Err(), w.watchErr))
	}
	return w, nil
}

// Close stops the informer; the Worker must not be used afterwards.
func (w *Worker) Close() {
	w.closeOnce.Do(func() {
		close(w.stop)
		w.factory.Shutdown()
	})
}

func (w *Worker) notify() {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *Worker) changes() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Namespace is the namespace of the worker's pods.
func (w *Worker) Namespace() string { return w.namespace }

// Name is the worker's name (Config.Worker).
func (w *Worker) Name() string { return w.worker }

// Changes is a channel closed at the next event the informer delivers for any pod of the worker
// (added, updated, deleted, or a relist): take it, read the cache (Get, List), then wait on it, so
// that no change between the read and the wait is missed.
func (w *Worker) Changes() <-chan struct{} { return w.changes() }

// Token is the bearer token of the worker's pod name.
func (w *Worker) Token(pod string) string { return w.key.Token(w.namespace, pod) }

// Create creates the step pod for spec, its shim accepting the pod's token. An invalid spec is an
// error before any request; a pod of that name already there is the API's AlreadyExists error
// (apierrors.IsAlreadyExists), which a caller retrying a create may take as done. With
// spec.ImageFrom or spec.ImageVolumes it first grants and resolves the images and creates the
// pod's image-pull Secret (image_worker.go). A hermetic spec's NetworkPolicy is created before the
// pod (hermetic.go). A pod created whose Secret or policy could not be given the pod as owner is
// returned with an error saying so: the pod is usable, and GC deletes them once the pod is gone.
func (w *Worker) Create(ctx context.Context, spec StepSpec) (*corev1.Pod, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.ImageFrom != nil || len(spec.ImageVolumes) > 0 {
		return w.createFrom(ctx, spec)
	}
	pod, err := StepPod(spec, w.worker, AuthOf(w.Token(spec.Name), spec.Delivery.TLS()))
	if err != nil {
		return nil, err
	}
	return w.createPod(ctx, spec, pod)
}

// Get is the cached pod name of this worker, or nil.
func (w *Worker) Get(name string) *corev1.Pod {
	p, err := w.lister.Get(name)
	if err != nil {
		return nil
	}
	return p
}

// List is every cached pod of this worker, sorted by name. The pods are the cache's: do not modify.
func (w *Worker) List() []*corev1.Pod {
	pods, _ := w.lister.List(labels.Everything())
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// Delete deletes pod name; a pod already gone is not an error.
func (w *Worker) Delete(ctx context.Context, name string) error {
	err := w.cs.CoreV1().Pods(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// WaitGone waits until pod name is gone from the cache; ctx's error if it ends first.
func (w *Worker) WaitGone(ctx context.Context, name string) error {
	for {
		changed := w.changes()
		if w.Get(name) == nil {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("k8s: pod %s still there: %w", name, ctx.Err())
		}
	}
}

// Shim is a client for the shim of the cached pod name, at its pod IP, with the pod's token, over TLS
// pinned to the key of that token when the pod's shim serves TLS (PodTLS).
func (w *Worker) Shim(name string) (*shim.Client, error) {
	pod := w.Get(name)
	if pod == nil {
		return nil, fmt.Errorf("k8s: no pod %s of worker %s in %s", name, w.worker, w.namespace)
	}
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("k8s: pod %s has no IP yet (%s)", name, ProgressOf(pod))
	}
	return w.ShimAt(name, pod.Status.PodIP, PodTLS(pod))
}

// Connect is Shim with the shim's protocol version checked (shim.CheckProtocol) the first time this
// Worker connects to the pod: a shim of another protocol version is refused with a
// *shim.IncompatibleError naming both versions and what to upgrade (docs/compatibility.md).
func (w *Worker) Connect(ctx context.Context, name string) (*shim.Client, error) {
	c, err := w.Shim(name)
	if err != nil {
		return nil, err
	}
	return w.checkOnce(ctx, name, c)
}

// ConnectViaProxy is ShimViaProxy with the same check as Connect.
func (w *Worker) ConnectViaProxy(ctx context.Context, name string) (*shim.Client, error) {
	c, err := w.ShimViaProxy(name)
	if err != nil {
		return nil, err
	}
	return w.checkOnce(ctx, name, c)
}

// checkOnce runs shim.CheckProtocol on c unless the pod (by UID, so a new pod of the same name is
// asked again) already passed it.
func (w *Worker) checkOnce(ctx context.Context, name string, c *shim.Client) (*shim.Client, error) {
	var uid string
	if pod := w.Get(name); pod != nil {
		uid = string(pod.UID)
	}
	if _, done := w.checked.Load(uid); done && uid != "" {
		return c, nil
	}
	if _, err := c.CheckProtocol(ctx); err != nil {
		return nil, fmt.Errorf("k8s: pod %s: %w", name, err)
	}
	if uid != "" {
		w.checked.Store(uid, struct{}{})
	}
	return c, nil
}

// ShimViaProxy is a client for the shim of pod name through the apiserver's
// pods/{name}:7777/proxy (pods/https:{name}:7777/proxy for a TLS shim, which the apiserver reaches
// over TLS without a pin), for a worker that cannot route to pod IPs (outside the cluster). Requests
// go out on the clientset's own transport (TLS and credentials from the rest config, refreshed as
// client-go does) and the token travels in shim.ProxyTokenHeader, because the apiserver keeps
// Authorization for itself. The credentials need get, create, update and delete on pods/proxy
// (`stepctl manifests --via proxy`). A pod not in the cache is read from the apiserver to learn
// whether it serves TLS; one that does not exist is taken as plain (its requests answer 404).
func (w *Worker) ShimViaProxy(name string) (*shim.Client, error) {
	rc, ok := w.cs.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc.Client == nil {
		return nil, errors.New("k8s: ShimViaProxy needs a clientset built from a rest config")
	}
	pod := w.Get(name)
	if pod == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		pod, err = w.cs.CoreV1().Pods(w.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("k8s: ShimViaProxy: reading pod %s: %w", name, err)
		}
	}
	target := name + ":" + strconv.Itoa(ShimPort)
	if PodTLS(pod) {
		target = "https:" + target
	}
	u := rc.Get().AbsPath("/api/v1/namespaces", w.namespace, "pods", target, "proxy").URL()
	// A client of its own, on the same transport: the clientset's http.Client may carry a Timeout,
	// which would cut output streams and long waits.
	c, err := shim.NewViaProxy(u.String(), rc.Client.Transport, w.Token(name))
	if err == nil {
		w.trackContact(name, c)
	}
	return c, err
}

// DeleteNow deletes pod name without a grace period: for a pod on a node that is lost, whose kubelet
// cannot end it gracefully (it kills what is left when it comes back). Gone already is no error.
func (w *Worker) DeleteNow(ctx context.Context, name string) error {
	zero := int64(0)
	err := w.cs.CoreV1().Pods(w.namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
