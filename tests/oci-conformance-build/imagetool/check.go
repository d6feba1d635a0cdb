package main

// The checks the conformance suite leaves out for read-only content: every manifest and blob
// served hashes to its digest and has the length and media type its descriptor says, tag and
// digest answer the same bytes, HEAD answers GET's headers, and refusals carry the OCI error codes.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
)

type checker struct {
	base, name, user, pass string
	failed                 bool
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (c *checker) fail(format string, a ...any) {
	c.failed = true
	fmt.Fprintf(os.Stderr, "imagetool check: FAIL: "+format+"\n", a...)
}

// do sends one request; auth is "" (none), "user" (the credentials) or a raw Authorization value.
func (c *checker) do(method, path, auth string) answer {
	req, err := http.NewRequest(method, c.base+path, nil)
	must(err)
	req.Header.Set("Accept", mtManifest+", "+mtIndex)
	switch auth {
	case "":
	case "user":
		if c.pass != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
	default:
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.fail("%s %s: %v", method, path, err)
		return answer{header: http.Header{}}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.fail("%s %s: reading the body: %v", method, path, err)
	}
	if v := resp.Header.Get("Docker-Distribution-API-Version"); v != "registry/2.0" {
		c.fail("%s %s: Docker-Distribution-API-Version %q, want registry/2.0", method, path, v)
	}
	return answer{resp.StatusCode, resp.Header, body}
}

// content checks a 200 answer of a manifest or blob GET against its digest, size and media type
// (mediaType "" for blobs), and the HEAD of the same path against it.
func (c *checker) content(path, digest string, size int64, mediaType string) []byte {
	get := c.do(http.MethodGet, path, "user")
	if get.status != http.StatusOK {
		c.fail("GET %s: status %d, want 200: %s", path, get.status, get.body)
		return nil
	}
	if got := digestOf(get.body); digest != "" && got != digest {
		c.fail("GET %s: body hashes to %s, want %s", path, got, digest)
	}
	if h := get.header.Get("Docker-Content-Digest"); h != digestOf(get.body) {
		c.fail("GET %s: Docker-Content-Digest %q, the body hashes to %s", path, h, digestOf(get.body))
	}
	if size >= 0 && int64(len(get.body)) != size {
		c.fail("GET %s: %d bytes, want %d", path, len(get.body), size)
	}
	if h := get.header.Get("Content-Length"); h != strconv.Itoa(len(get.body)) {
		c.fail("GET %s: Content-Length %q for %d bytes", path, h, len(get.body))
	}
	if mediaType != "" && get.header.Get("Content-Type") != mediaType {
		c.fail("GET %s: Content-Type %q, want %q", path, get.header.Get("Content-Type"), mediaType)
	}
	head := c.do(http.MethodHead, path, "user")
	if head.status != http.StatusOK || len(head.body) != 0 {
		c.fail("HEAD %s: status %d with %d bytes of body, want 200 and none", path, head.status, len(head.body))
	}
	for _, k := range []string{"Docker-Content-Digest", "Content-Length", "Content-Type"} {
		if head.header.Get(k) != get.header.Get(k) {
			c.fail("HEAD %s: %s %q, GET answers %q", path, k, head.header.Get(k), get.header.Get(k))
		}
	}
	return get.body
}

// refused checks an error answer: the status and the first error's code.
func (c *checker) refused(method, path, auth string, status int, code string) answer {
	a := c.do(method, path, auth)
	var e struct{ Errors []struct{ Code string } }
	if a.status != status {
		c.fail("%s %s: status %d, want %d %s: %s", method, path, a.status, status, code, a.body)
	} else if method != http.MethodHead && (json.Unmarshal(a.body, &e) != nil || len(e.Errors) == 0 || e.Errors[0].Code != code) {
		c.fail("%s %s: body %s, want an OCI error with code %s", method, path, a.body, code)
	}
	return a
}

func (c *checker) run(auth, rootfs bool, want string, tags []string, deniedToken string) (tagList, manifests, blobs string) {
	v2 := "/v2/" + c.name
	if auth {
		c.refusals(v2, deniedToken)
	}
	if a := c.do(http.MethodGet, "/v2/", "user"); a.status != http.StatusOK {
		c.fail("GET /v2/: status %d, want 200: %s", a.status, a.body)
	}
	head := c.do(http.MethodHead, v2+"/manifests/latest", "user")
	digest := head.header.Get("Docker-Content-Digest")
	if head.status != http.StatusOK || !strings.HasPrefix(digest, "sha256:") {
		c.fail("HEAD %s/manifests/latest: status %d, Docker-Content-Digest %q", v2, head.status, digest)
		return
	}
	if want != "" && digest != want {
		c.fail("HEAD %s/manifests/latest: digest %s, want %s (the layout's)", v2, digest, want)
	}
	mediaType := head.header.Get("Content-Type")
	body := c.content(v2+"/manifests/latest", digest, -1, mediaType)
	var seen seenContent
	c.walk(descriptor{MediaType: mediaType, Digest: digest, Size: int64(len(body))}, rootfs, &seen)
	for _, tag := range tags {
		if tag == "latest" {
			continue
		}
		h := c.do(http.MethodHead, v2+"/manifests/"+tag, "user")
		d := h.header.Get("Docker-Content-Digest")
		if h.status != http.StatusOK || !slices.Contains(seen.manifests, d) {
			c.fail("HEAD %s/manifests/%s: status %d, digest %q, want 200 and one of %v", v2, tag, h.status, d, seen.manifests)
			continue
		}
		c.content(v2+"/manifests/"+tag, d, -1, h.header.Get("Content-Type"))
	}
	unknown := "sha256:" + random()
	c.refused(http.MethodGet, v2+"/blobs/"+unknown, "user", http.StatusNotFound, "BLOB_UNKNOWN")
	c.refused(http.MethodHead, v2+"/blobs/"+unknown, "user", http.StatusNotFound, "")
	c.refused(http.MethodGet, v2+"/manifests/"+unknown, "user", http.StatusNotFound, "MANIFEST_UNKNOWN")
	c.refused(http.MethodGet, v2+"/manifests/no-such-tag", "user", http.StatusNotFound, "MANIFEST_UNKNOWN")
	c.refused(http.MethodDelete, v2+"/manifests/"+digest, "user", http.StatusMethodNotAllowed, "UNSUPPORTED")
	return strings.Join(tags, " "), strings.Join(seen.manifests, " "), strings.Join(seen.blobs, " ")
}

// refusals checks the answers to requests without a grant token: 401 with a Basic challenge, and
// 403 DENIED for deniedToken (the pod's own token) when given: as a Bearer, or as the password of
// Basic credentials for the user IMAGETOOL_DENIED_USER when set (the node-local forwarder takes
// only Basic and passes the password on as a Bearer).
func (c *checker) refusals(v2, deniedToken string) {
	a := c.refused(http.MethodGet, "/v2/", "", http.StatusUnauthorized, "UNAUTHORIZED")
	if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Basic ") {
		c.fail("GET /v2/ without credentials: WWW-Authenticate %q, want Basic", a.header.Get("WWW-Authenticate"))
	}
	c.refused(http.MethodGet, v2+"/manifests/latest", "", http.StatusUnauthorized, "UNAUTHORIZED")
	c.refused(http.MethodGet, v2+"/manifests/latest", "Bearer "+random(), http.StatusUnauthorized, "UNAUTHORIZED")
	if deniedToken != "" {
		auth := "Bearer " + deniedToken
		if user := os.Getenv("IMAGETOOL_DENIED_USER"); user != "" {
			auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+deniedToken))
		}
		c.refused(http.MethodGet, v2+"/manifests/latest", auth, http.StatusForbidden, "DENIED")
	}
}

// content lists the manifests and blobs seen, each once, in the order first seen.
type seenContent struct{ manifests, blobs []string }

// walk checks the manifest or index d by digest and everything it refers to.
func (c *checker) walk(d descriptor, rootfs bool, seen *seenContent) {
	v2 := "/v2/" + c.name
	if slices.Contains(seen.manifests, d.Digest) {
		return
	}
	seen.manifests = append(seen.manifests, d.Digest)
	body := c.content(v2+"/manifests/"+d.Digest, d.Digest, d.Size, d.MediaType)
	var m struct {
		MediaType string
		Manifests []descriptor
		Config    descriptor
		Layers    []descriptor
	}
	if err := json.Unmarshal(body, &m); err != nil || m.MediaType != d.MediaType ||
		(m.MediaType != mtIndex && m.MediaType != mtManifest) {
		c.fail("GET %s/manifests/%s: not an OCI index or manifest of media type %q (%v)", v2, d.Digest, d.MediaType, err)
		return
	}
	for _, child := range m.Manifests {
		c.walk(child, rootfs, seen)
	}
	if m.MediaType != mtManifest {
		return
	}
	if rootfs {
		c.rootfsImage(m.Config, m.Layers)
	}
	for _, b := range append([]descriptor{m.Config}, m.Layers...) {
		if !slices.Contains(seen.blobs, b.Digest) {
			seen.blobs = append(seen.blobs, b.Digest)
			c.content(v2+"/blobs/"+b.Digest, b.Digest, b.Size, "")
		}
	}
}

// random is 32 random bytes in hex: an unknown digest or token.
func random() string {
	var b [32]byte
	_, err := rand.Read(b[:])
	must(err)
	return hex.EncodeToString(b[:])
}
