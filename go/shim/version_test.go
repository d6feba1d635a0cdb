// The compatibility check: a shim of this protocol version passes, one announcing another is refused
// with one line naming both versions and what to upgrade, and a route an older shim lacks is told
// apart from a missing process.

package shim_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestCheckProtocolAcceptsTheRealShim(t *testing.T) {
	s := startShim(t)
	info, err := s.Client.CheckProtocol(shimtest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Protocol != shim.ProtocolVersion {
		t.Fatalf("info = %+v", info)
	}
}

// infoServer answers every request with a /v1/info of protocol `protocol`, or 404 no_route for any
// other path, as a real listener.
func infoServer(t *testing.T, protocol int) *shim.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/info" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"no_route","message":"no route %s"}}`, r.URL.Path)
			return
		}
		fmt.Fprintf(w, `{"protocol":%d,"version":"9.1.0","boot_id":"00112233445566778899aabbccddeeff","later":true}`, protocol)
	}))
	t.Cleanup(srv.Close)
	c, err := shim.New(srv.URL, "token")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckProtocolRefusesAnotherVersion(t *testing.T) {
	ctx := shimtest.Context(t)
	for _, tc := range []struct {
		protocol int
		advice   string
	}{
		{shim.ProtocolVersion + 1, "upgrade the worker (this Go client) to a release of protocol 2"},
		{shim.ProtocolVersion - 1, "upgrade the shim image (or ConfigMap) to a release of protocol 1"},
	} {
		_, err := infoServer(t, tc.protocol).CheckProtocol(ctx)
		if !errors.Is(err, shim.ErrIncompatible) {
			t.Fatalf("protocol %d: err = %v, want ErrIncompatible", tc.protocol, err)
		}
		want := fmt.Sprintf("shim: the shim speaks protocol %d (stepshim 9.1.0) and this client protocol 1: %s",
			tc.protocol, tc.advice)
		if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("protocol %d: message %q, want one line starting %q", tc.protocol, err, want)
		}
	}
	if _, err := infoServer(t, shim.ProtocolVersion).CheckProtocol(ctx); err != nil {
		t.Fatalf("same protocol, a newer release with a field this client does not know: %v", err)
	}
}

func TestMissingRouteIsUnsupported(t *testing.T) {
	c := infoServer(t, shim.ProtocolVersion)
	_, err := c.Grants(shimtest.Context(t))
	if !shim.IsUnsupported(err) || shim.IsNotFound(err) {
		t.Fatalf("err = %v: want unsupported, not a missing object", err)
	}
	if !strings.Contains(err.Error(), "older than this client") {
		t.Fatalf("message %q does not say the shim is older", err)
	}
}
