package main

// Pushing a layout to a registry that accepts pushes (CNCF distribution's, to check the harness
// against a known registry): each blob by a monolithic POST and PUT, each manifest by digest and
// under its tag, then latest as the shim serves it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

func push(base, name, dir string) {
	indexJSON := readFile(dir, "index.json")
	var index struct{ Manifests []descriptor }
	must(json.Unmarshal(indexJSON, &index))
	for _, m := range index.Manifests {
		body := readBlob(dir, m.Digest)
		var manifest struct {
			Config descriptor
			Layers []descriptor
		}
		must(json.Unmarshal(body, &manifest))
		for _, d := range append([]descriptor{manifest.Config}, manifest.Layers...) {
			pushBlob(base, name, d.Digest, readBlob(dir, d.Digest))
		}
		pushManifest(base, name, m.Digest, m.MediaType, body)
		if tag := m.Annotations[refName]; tag != "" {
			pushManifest(base, name, tag, m.MediaType, body)
		}
	}
	// latest: the only manifest, or the index itself when it lists several.
	if len(index.Manifests) == 1 {
		pushManifest(base, name, "latest", index.Manifests[0].MediaType, readBlob(dir, index.Manifests[0].Digest))
	} else {
		pushManifest(base, name, "latest", mtIndex, indexJSON)
	}
}

func pushManifest(base, name, ref, mediaType string, body []byte) {
	req, err := http.NewRequest(http.MethodPut, base+"/v2/"+name+"/manifests/"+ref, bytes.NewReader(body))
	must(err)
	req.Header.Set("Content-Type", mediaType)
	expect(req, http.StatusCreated)
}

func pushBlob(base, name, digest string, b []byte) {
	resp, err := http.Post(base+"/v2/"+name+"/blobs/uploads/", "application/octet-stream", nil)
	must(err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		must(fmt.Errorf("POST upload of %s: status %d", digest, resp.StatusCode))
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	must(err)
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	req, err := http.NewRequest(http.MethodPut, loc.String(), bytes.NewReader(b))
	must(err)
	req.Header.Set("Content-Type", "application/octet-stream")
	expect(req, http.StatusCreated)
}

func expect(req *http.Request, status int) {
	resp, err := http.DefaultClient.Do(req)
	must(err)
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != status {
		must(fmt.Errorf("%s %s: status %d, want %d: %s", req.Method, (&url.URL{Path: req.URL.Path}).String(),
			resp.StatusCode, status, msg))
	}
}

func readBlob(dir, digest string) []byte {
	return readFile(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func readFile(parts ...string) []byte {
	b, err := os.ReadFile(filepath.Join(parts...))
	must(err)
	return b
}
