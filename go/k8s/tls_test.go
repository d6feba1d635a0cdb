// TLS in the kit without a cluster: the delivery's modes, the pod a TLS delivery builds, and a Worker
// (its cache filled by hand) reaching pods at 127.x.y.z:7777 where Go servers stand in for shims (a
// TLS one holding the key of the pod's seed, one holding another key, a plain one) and through a
// stand-in apiserver's pods/proxy, whose path must name https for a TLS pod. The stand-ins share one
// free port instead of 7777, which a shim on this host may hold on every address.

package k8s

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"stepshim.dev/go/shim"
)

func TestDeliveryTLSModes(t *testing.T) {
	if d := InitContainer("img"); !d.TLS() {
		t.Error("init container delivery: TLS should be on by default")
	}
	if d := FromConfigMap("cm"); d.TLS() {
		t.Error("ConfigMap delivery: TLS should be off by default")
	}
	for _, c := range []struct {
		d    Delivery
		mode TLSMode
		want bool
		err  string
	}{
		{InitContainer("img"), TLSOff, false, ""},
		{InitContainer("img"), TLSOn, true, ""},
		{InitContainer("img"), TLSDefault, true, ""},
		{FromConfigMap("cm"), TLSOff, false, ""},
		{FromConfigMap("cm"), TLSDefault, false, ""},
		{FromConfigMap("cm"), TLSOn, false, "TLS needs init-container delivery"},
		{InitContainer("img"), "yes", false, `TLS mode "yes"`},
	} {
		d, err := c.d.WithTLS(c.mode)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s with %q: want an error with %q, got %v", c.d, c.mode, c.err, err)
			}
			continue
		}
		if err != nil || d.TLS() != c.want {
			t.Errorf("%s with %q: TLS %v (%v), want %v", c.d, c.mode, d.TLS(), err, c.want)
		}
	}
	bad := StepSpec{Name: "s", Image: "i", Delivery: Delivery{configMap: "cm", tls: true}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "plain build") {
		t.Errorf("Validate of a ConfigMap delivery with TLS: %v", err)
	}
}

func TestStepPodTLSAndPlain(t *testing.T) {
	token := strings.Repeat("ab", 32)
	seed := shim.TLSSeed(token)
	plainInit, _ := InitContainer("img").WithTLS(TLSOff)
	for _, c := range []struct {
		d    Delivery
		tls  bool
		init string
	}{{InitContainer("img"), true, TLSBinary}, {plainInit, false, PlainBinary}, {FromConfigMap("cm"), false, ""}} {
		pod := mustStepPod(t, StepSpec{Name: "s", Image: "i", Delivery: c.d}, "w", AuthOf(token, c.d.TLS()))
		main := pod.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range main.Env {
			env[e.Name] = e.Value
		}
		// A TLS shim is probed by a TCP connection (no handshake a second), a plain one by /healthz.
		probe := main.ReadinessProbe
		tcp := probe.TCPSocket != nil && probe.HTTPGet == nil
		plain := probe.HTTPGet != nil && probe.HTTPGet.Path == ProbePath && probe.HTTPGet.Scheme == ""
		if PodTLS(pod) != c.tls || (env[EnvTLSSeed] == hex.EncodeToString(seed[:])) != c.tls ||
			tcp != c.tls || plain == c.tls || env[EnvTokenSHA256] != TokenSHA256(token) {
			t.Errorf("%s: PodTLS %v, seed %q, probe %+v, token hash %q", c.d, PodTLS(pod), env[EnvTLSSeed], probe.ProbeHandler, env[EnvTokenSHA256])
		}
		if c.init != "" && pod.Spec.InitContainers[0].Command[0] != c.init {
			t.Errorf("%s: init container runs %v, want %s", c.d, pod.Spec.InitContainers[0].Command, c.init)
		}
	}
	if _, err := StepPod(StepSpec{Name: "s", Image: "i", Delivery: InitContainer("img")}, "w", PodAuth{TokenSHA256: "x"}); err == nil {
		t.Error("StepPod built a TLS pod without a seed")
	}
	if _, err := StepPod(StepSpec{Name: "s", Image: "i"}, "w", PodAuth{TokenSHA256: "x"}); err == nil {
		t.Error("StepPod built a pod without a shim delivery")
	}
}

// The kit's derivation chains into the shared vectors: token.json's key and pod give its token, and
// tls.json gives that token's seed and pin.
func TestAuthMatchesTheGoldenFiles(t *testing.T) {
	var tok struct {
		KeyHex      string `json:"keyHex"`
		Namespace   string `json:"namespace"`
		Pod         string `json:"pod"`
		Token       string `json:"token"`
		TokenSHA256 string `json:"tokenSha256"`
	}
	var vec struct {
		About   string `json:"about"`
		Vectors []struct {
			Token string `json:"token"`
			Seed  string `json:"seed"`
			Pin   string `json:"pin"`
		} `json:"vectors"`
	}
	testdata(t, "token.json", &tok)
	testdata(t, "tls.json", &vec)
	kb, _ := hex.DecodeString(tok.KeyHex)
	k, err := NewKey(kb)
	if err != nil {
		t.Fatal(err)
	}
	token := k.Token(tok.Namespace, tok.Pod)
	for _, c := range vec.Vectors {
		if c.Token != token {
			continue
		}
		if a := AuthOf(token, true); a.TLSSeed != c.Seed || a.TokenSHA256 != tok.TokenSHA256 {
			t.Errorf("AuthOf(token.json's token): %+v, want seed %s", a, c.Seed)
		}
		if pin := shim.TLSPinOfToken(token); pin != c.Pin {
			t.Errorf("pin: %s, want %s", pin, c.Pin)
		}
		return
	}
	t.Fatalf("tls.json has no case for token.json's token %s", token)
}

// handWorker is a Worker whose cache holds pods, on the clientset cs (nil: none), reaching shims at
// port.
func handWorker(t *testing.T, cs kubernetes.Interface, port int, pods ...*corev1.Pod) *Worker {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := NewKey([]byte(strings.Repeat("k", 32)))
	return &Worker{cs: cs, namespace: "steps", worker: "w", key: key, port: port,
		lister: listersv1.NewPodLister(idx).Pods("steps"), changed: make(chan struct{})}
}

// podAt is the pod w would create for name with delivery d, running at ip.
func podAt(w *Worker, name, ip string, d Delivery) *corev1.Pod {
	p, err := StepPod(StepSpec{Name: name, Image: "i", Delivery: d}, w.worker, AuthOf(w.Token(name), d.TLS()))
	if err != nil {
		panic(err) // a test's own fixed spec
	}
	p.Namespace, p.UID, p.Status.PodIP = w.namespace, types.UID("uid-"+name), ip
	return p
}

// fakeShim serves /v1/info at ip:port (port 0: a free one) over TLS with cert, or plain HTTP when
// cert is nil, and records the Authorization headers it got. It returns the port.
func fakeShim(t *testing.T, ip string, port int, cert *tls.Certificate) (*[]string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var auths []string
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"protocol":%d,"version":"fake","boot_id":"b"}`, shim.ProtocolVersion)
	})}
	if cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &auths, ln.Addr().(*net.TCPAddr).Port
}

func carrier(t *testing.T, token string) *tls.Certificate {
	key := shim.TLSKey(shim.TLSSeed(token))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<35, 0)}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestWorkerConnectsOverTLSWithThePodsPin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := fmt.Sprintf("127.%d.%d.", 100+rand.N(100), rand.N(250))
	plainInit, _ := InitContainer("img").WithTLS(TLSOff)
	w := handWorker(t, nil, 0)
	tlsAuths, port := fakeShim(t, base+"1", 0, carrier(t, w.Token("tls")))
	plainAuths, _ := fakeShim(t, base+"2", port, nil)
	impostorAuths, _ := fakeShim(t, base+"3", port, carrier(t, w.Token("tls")))
	w = handWorker(t, nil, port,
		podAt(w, "tls", base+"1", InitContainer("img")),
		podAt(w, "plain", base+"2", plainInit),
		podAt(w, "impostor", base+"3", InitContainer("img")))
	// Config.DialShim opens the shims' connections, TLS or not.
	var dialMu sync.Mutex
	dialed := map[string]bool{}
	w.dialShim = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialMu.Lock()
		dialed[addr] = true
		dialMu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}

	for name, want := range map[string]string{
		"tls":   fmt.Sprintf("https://%s1:%d", base, port),
		"plain": fmt.Sprintf("http://%s2:%d", base, port),
	} {
		c, err := w.Connect(ctx, name)
		if err != nil {
			t.Fatalf("connect %s: %v", name, err)
		}
		if c.BaseURL() != want {
			t.Errorf("%s: base URL %s, want %s", name, c.BaseURL(), want)
		}
		src, pin, err := w.PullSource(name)
		if err != nil || src != want || pin != c.Pin() || (pin != "") != (name == "tls") {
			t.Errorf("PullSource(%s) = %s, %q, %v; client pin %q", name, src, pin, err, c.Pin())
		}
	}
	dialMu.Lock()
	if !dialed[net.JoinHostPort(base+"1", strconv.Itoa(port))] || !dialed[net.JoinHostPort(base+"2", strconv.Itoa(port))] {
		t.Errorf("Config.DialShim dialed %v, want both shims", dialed)
	}
	dialMu.Unlock()
	if len(*tlsAuths) != 1 || (*tlsAuths)[0] != "Bearer "+w.Token("tls") || len(*plainAuths) != 1 {
		t.Errorf("requests: TLS shim %d, plain shim %d", len(*tlsAuths), len(*plainAuths))
	}
	// The impostor holds the key of another pod: the pin of this pod's token refuses it before the
	// token is sent.
	if _, err := w.Connect(ctx, "impostor"); !errors.Is(err, shim.ErrPinMismatch) {
		t.Fatalf("connect to a shim holding another pod's key: %v", err)
	}
	if len(*impostorAuths) != 0 {
		t.Fatal("the token reached the impostor")
	}
}

func TestShimViaProxyNamesHTTPSForTLSPods(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	plainInit, _ := InitContainer("img").WithTLS(TLSOff)
	w := handWorker(t, nil, ShimPort)
	uncached := podAt(w, "uncached", "10.0.0.9", InitContainer("img"))
	api := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/namespaces/steps/pods/uncached":
			_ = json.NewEncoder(rw).Encode(uncached)
			return
		case "/api/v1/namespaces/steps/pods/missing":
			rw.WriteHeader(http.StatusNotFound)
			_, _ = rw.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		_, _ = fmt.Fprintf(rw, `{"protocol":%d,"version":"fake","boot_id":"b"}`, shim.ProtocolVersion)
	}))
	defer api.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	w = handWorker(t, cs, ShimPort, podAt(w, "tls", "10.0.0.1", InitContainer("img")), podAt(w, "plain", "10.0.0.2", plainInit))
	for _, name := range []string{"tls", "plain", "uncached", "missing"} {
		c, err := w.ShimViaProxy(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := []string{
		"/api/v1/namespaces/steps/pods/https:tls:7777/proxy/v1/info",
		"/api/v1/namespaces/steps/pods/plain:7777/proxy/v1/info",
		"/api/v1/namespaces/steps/pods/https:uncached:7777/proxy/v1/info",
		"/api/v1/namespaces/steps/pods/missing:7777/proxy/v1/info",
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("proxied paths:\n%s\nwant:\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
	}
}

// mustStepPod is StepPod's pod for a spec the test knows valid.
func mustStepPod(t *testing.T, spec StepSpec, worker string, auth PodAuth) *corev1.Pod {
	t.Helper()
	pod, err := StepPod(spec, worker, auth)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}
