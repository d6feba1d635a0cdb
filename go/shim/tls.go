// TLS (PROTOCOL.md section 1.1): the seed of a shim's Ed25519 key derived from its pod token, the pin
// (the key's public half), and the client side of the handshake, which accepts TLS 1.3 only and a
// leaf certificate carrying the pinned key and nothing else: no certificate authority, no host name,
// no session resumption.

package shim

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
)

// tlsSeedMessage is what the pod token signs (as the HMAC key) to make the seed.
const tlsSeedMessage = "stepshim tls seed v1"

// ErrPinMismatch matches (with errors.Is) a handshake refused because the shim's key is not the pinned
// one, or because it presented no Ed25519 key at all.
var ErrPinMismatch = errors.New("shim: TLS key does not match the pin")

// TLSSeed is the seed of the shim key of the pod whose token is token:
// HMAC-SHA256(key = token, message = "stepshim tls seed v1"). Its hex form is what
// STEPSHIM_TLS_SEED carries; it reveals nothing of the token.
func TLSSeed(token string) [32]byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(tlsSeedMessage))
	var seed [32]byte
	copy(seed[:], m.Sum(nil))
	return seed
}

// TLSKey is the Ed25519 key whose RFC 8032 seed is seed: the key the shim presents.
func TLSKey(seed [32]byte) ed25519.PrivateKey { return ed25519.NewKeyFromSeed(seed[:]) }

// TLSPin is the pin of the shim holding seed: its Ed25519 public key as 64 lowercase hex digits.
func TLSPin(seed [32]byte) string {
	return hex.EncodeToString(TLSKey(seed).Public().(ed25519.PublicKey))
}

// TLSPinOfToken is TLSPin(TLSSeed(token)): the pin a controller expects of the pod with that token.
func TLSPinOfToken(token string) string { return TLSPin(TLSSeed(token)) }

// NewTLS returns a Client for the shim serving TLS at baseURL (e.g. "https://10.0.0.7:7777")
// presenting token, which accepts only a shim whose key is pin (PinnedTLSConfig; TLSPinOfToken gives
// the pin of a pod's token). Otherwise it is the client New makes.
func NewTLS(baseURL, token, pin string) (*Client, error) {
	u, err := parseBase(baseURL, "https")
	if err != nil {
		return nil, err
	}
	cfg, err := PinnedTLSConfig(pin)
	if err != nil {
		return nil, err
	}
	return &Client{base: u, token: token, pin: pin, HTTP: &http.Client{Transport: newTransport(cfg)}}, nil
}

// Pin is the TLS pin of a client made by NewTLS (the one a pull of this shim's files needs as its
// source_pin), else "".
func (c *Client) Pin() string { return c.pin }

// parsePin checks a pin (64 hex digits, either case) and returns the public key it names.
func parsePin(pin string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(pin)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("shim: TLS pin %q: want 64 hex digits (an Ed25519 public key)", pin)
	}
	return ed25519.PublicKey(b), nil
}

// PinnedTLSConfig is the client TLS configuration for a shim pinned by pin: TLS 1.3 only, ALPN
// http/1.1, no session tickets, and a handshake accepted only when the leaf certificate's public key
// is the pinned Ed25519 key (TLS 1.3 has the server sign the handshake with that key, which crypto/tls
// checks). The certificate is a carrier: its issuer, dates and names are not looked at, and no
// certificate authority can stand in for the pin. A mismatch fails the handshake with an error
// matching ErrPinMismatch.
func PinnedTLSConfig(pin string) (*tls.Config, error) {
	want, err := parsePin(pin)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		NextProtos: []string{"http/1.1"},
		// The chain is not verified against any authority; VerifyConnection checks the pin instead,
		// on every handshake (there is no resumption: no ClientSessionCache, no tickets).
		InsecureSkipVerify:     true,
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return checkPin(cs, want)
		},
	}, nil
}

// checkPin accepts a TLS 1.3 connection whose leaf certificate carries the Ed25519 key want.
func checkPin(cs tls.ConnectionState, want ed25519.PublicKey) error {
	if cs.Version != tls.VersionTLS13 {
		return fmt.Errorf("shim: TLS version %#04x, want 1.3", cs.Version)
	}
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no certificate", ErrPinMismatch)
	}
	got, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok {
		return fmt.Errorf("%w: the certificate's key is %T, not Ed25519", ErrPinMismatch, cs.PeerCertificates[0].PublicKey)
	}
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return fmt.Errorf("%w: got %x, want %x", ErrPinMismatch, []byte(got), []byte(want))
	}
	return nil
}
