// Per-pod bearer tokens with no extra API objects, as the Rust controller derives them
// (controller/src/token.rs): the token of a pod is hex(HMAC-SHA256(key, "namespace/pod")). The pod
// spec carries only the token's SHA-256, so reading the pod reveals nothing usable, and a restarted
// worker re-derives every token from its key alone.

package k8s

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
)

// MinKeyLen is the shortest key accepted: 32 bytes, the HMAC-SHA256 block strength.
const MinKeyLen = 32

// Key is a worker's secret key. Its String never shows the bytes.
type Key struct{ b []byte }

// NewKey returns a key of b (copied); it must hold at least MinKeyLen bytes.
func NewKey(b []byte) (Key, error) {
	if len(b) < MinKeyLen {
		return Key{}, fmt.Errorf("k8s: key of %d bytes; at least %d are needed", len(b), MinKeyLen)
	}
	return Key{b: append([]byte(nil), b...)}, nil
}

// KeyFromFile reads a key file: raw bytes, a trailing newline included, as stepctl --key-file reads it.
func KeyFromFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("k8s: key file: %w", err)
	}
	k, err := NewKey(b)
	if err != nil {
		return Key{}, fmt.Errorf("%w (key file %s; e.g. head -c 32 /dev/urandom > %s)", err, path, path)
	}
	return k, nil
}

// String hides the key.
func (k Key) String() string { return "Key(<secret>)" }

// GoString hides the key from %#v too.
func (k Key) GoString() string { return k.String() }

// Token is the bearer token of pod in namespace: 64 lowercase hex digits.
func (k Key) Token(namespace, pod string) string {
	m := hmac.New(sha256.New, k.b)
	m.Write([]byte(namespace))
	m.Write([]byte("/"))
	m.Write([]byte(pod))
	return hex.EncodeToString(m.Sum(nil))
}

// TokenSHA256 is the hex SHA-256 of token, the form STEPSHIM_TOKEN_SHA256 carries in the pod spec.
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
