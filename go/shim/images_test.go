// ImageManifest against the real shim: the digest of a rootfs/ + metadata.json directory, checked
// against the manifest the shim serves, and the refusals with the shim's OCI codes.

package shim_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// imageDir writes a Concourse-format image directory named name under root.
func imageDir(t *testing.T, root, name string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for file, body := range map[string]string{
		"rootfs/bin/hello": "#!/bin/sh\necho hello\n",
		"metadata.json":    `{"env":["A=1"],"cmd":["/bin/hello"]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ociCode(err error) string {
	var e *shim.APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// skipWithoutImages skips a test against a shim older than 0.2.0, which serves no images
// (PROTOCOL.md 4.12); the compatibility run points the suite at the previous release's shim.
func skipWithoutImages(t *testing.T, s *testShim) {
	t.Helper()
	skipBefore020(t, s, "images under /v2/")
}

func TestImageManifestResolvesAGrantedDirectory(t *testing.T) {
	s := startShim(t)
	skipWithoutImages(t, s)
	ctx := context.Background()
	root := t.TempDir()
	dir := imageDir(t, root, "app-image")
	token, _, err := s.Client.Grant(ctx, dir, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(token) != 64 {
		t.Errorf("a grant token of %d hex digits, want 64 (32 bytes)", len(token))
	}
	granted := s.Client.WithGrantToken(token)
	h, err := granted.ImageManifest(ctx, "app-image", "latest")
	if err != nil {
		t.Fatal(err)
	}
	// The digest is the manifest's own, as a kubelet checks it.
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v2/app-image/manifests/latest", nil)
	req.SetBasicAuth("plain", token)
	resp, err := s.httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(body)
	if want := "sha256:" + hex.EncodeToString(sum[:]); h.Digest != want || h.Size != int64(len(body)) {
		t.Errorf("HEAD says %+v; GET served %d bytes of %s", h, len(body), want)
	}
	if h.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("media type %q", h.MediaType)
	}

	// Refusals: not an image, the pod's own token, an expired grant.
	plain := filepath.Join(root, "not-an-image")
	if err := os.MkdirAll(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	tok2, _, err := s.Client.Grant(ctx, plain, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Client.WithGrantToken(tok2).ImageManifest(ctx, "not-an-image", "latest")
	if c := ociCode(err); c != "NAME_UNKNOWN" && c != "MANIFEST_UNKNOWN" {
		t.Errorf("not an image: %v", err)
	}
	if _, err := s.Client.ImageManifest(ctx, "app-image", "latest"); ociCode(err) != "DENIED" {
		t.Errorf("the pod token: %v", err)
	}
	tok3, _, err := s.Client.Grant(ctx, dir, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if _, err := s.Client.WithGrantToken(tok3).ImageManifest(ctx, "app-image", "latest"); ociCode(err) != "UNAUTHORIZED" {
		t.Errorf("an expired grant: %v", err)
	}
}
