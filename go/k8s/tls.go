// TLS of the step pods (PROTOCOL.md 1.1): whether a delivery serves TLS (on by default with the init
// container, off with the ConfigMap, whose binary is the plain build), what the pod spec carries of
// the token (its SHA-256 and, for TLS, the seed of the shim's key), and how to tell a TLS pod from
// its spec. The worker pins each shim's key from the token it derives, never from the pod.

package k8s

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"stepshim.dev/go/shim"
)

// TLSMode says whether a delivery's shims serve TLS.
type TLSMode string

// The modes.
const (
	// TLSDefault is on for InitContainer and off for FromConfigMap.
	TLSDefault TLSMode = ""
	// TLSOn asks for TLS; only an init container delivers the TLS build.
	TLSOn TLSMode = "on"
	// TLSOff serves plain HTTP: for shim images without /stepshim-tls.
	TLSOff TLSMode = "off"
)

var errConfigMapTLS = errors.New("TLS needs init-container delivery: the shim ConfigMap holds the plain build")

// WithTLS is d with TLS set by mode. Asking for TLS with ConfigMap delivery is an error, as is a
// mode not listed above: check it where the worker's configuration is read.
func (d Delivery) WithTLS(mode TLSMode) (Delivery, error) {
	switch mode {
	case TLSDefault:
		d.tls = d.initImage != ""
	case TLSOn:
		if d.configMap != "" {
			return d, fmt.Errorf("k8s: %s: %w", d, errConfigMapTLS)
		}
		d.tls = true
	case TLSOff:
		d.tls = false
	default:
		return d, fmt.Errorf("k8s: TLS mode %q: want %q, %q or empty", mode, TLSOn, TLSOff)
	}
	return d, nil
}

// TLS says whether the shims of this delivery serve TLS.
func (d Delivery) TLS() bool { return d.tls }

// PodAuth is what a step pod's spec carries of its token: the token's SHA-256, and for a TLS shim the
// hex seed of its key (which reveals nothing of the token either).
type PodAuth struct {
	TokenSHA256 string
	// TLSSeed is empty for a plain shim.
	TLSSeed string
}

// AuthOf is the PodAuth of token, with the TLS seed when tls.
func AuthOf(token string, tls bool) PodAuth {
	a := PodAuth{TokenSHA256: TokenSHA256(token)}
	if tls {
		seed := shim.TLSSeed(token)
		a.TLSSeed = hex.EncodeToString(seed[:])
	}
	return a
}

// PodTLS says whether pod's shim serves TLS: its main container's environment has STEPSHIM_TLS_SEED.
func PodTLS(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != MainContainer {
			continue
		}
		for _, e := range c.Env {
			if e.Name == EnvTLSSeed {
				return true
			}
		}
	}
	return false
}

// Pin is the TLS pin of pod name's shim, derived from its token: what a client or a pull of that shim
// must see.
func (w *Worker) Pin(name string) string { return shim.TLSPinOfToken(w.Token(name)) }

// ShimAt is a client for the shim of pod name at ip: over TLS pinned to the pod's key when tls (see
// PodTLS), else plain HTTP.
func (w *Worker) ShimAt(name, ip string, tls bool) (*shim.Client, error) {
	hostPort := net.JoinHostPort(ip, strconv.Itoa(w.port))
	var c *shim.Client
	var err error
	if tls {
		c, err = shim.NewTLS("https://"+hostPort, w.Token(name), w.Pin(name))
	} else {
		c, err = shim.New("http://"+hostPort, w.Token(name))
	}
	if err == nil && w.dialShim != nil {
		tr, ok := c.HTTP.Transport.(*http.Transport)
		if !ok {
			return nil, errors.New("k8s: a shim client without an *http.Transport cannot take Config.DialShim")
		}
		tr.DialContext = w.dialShim
	}
	if err == nil {
		w.trackContact(name, c)
	}
	return c, err
}

// PullSource is how another pod's shim reaches the cached pod name for a pull (shim.PullSpec's Source
// and SourcePin): https://IP:7777 and the pod's pin for a TLS pod, http://IP:7777 and no pin else.
// It is what a worker that reaches shims through the proxy uses to have two pods copy directly.
func (w *Worker) PullSource(name string) (source, pin string, err error) {
	pod := w.Get(name)
	if pod == nil || pod.Status.PodIP == "" {
		return "", "", fmt.Errorf("k8s: pod %s of worker %s has no IP (%s)", name, w.worker, ProgressOf(pod))
	}
	hostPort := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(w.port))
	if PodTLS(pod) {
		return "https://" + hostPort, w.Pin(name), nil
	}
	return "http://" + hostPort, "", nil
}
