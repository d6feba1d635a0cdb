// Images a shim serves under /v2/ (PROTOCOL.md 4.12, the pull side of the OCI distribution spec):
// what a controller asks before it names an image of a step pod by digest. Errors there carry the
// registry's error body ({"errors":[{"code":..,"message":..}]}), read into an *APIError whose Code
// is the OCI code (NAME_UNKNOWN, UNAUTHORIZED, ...).

package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
)

// ManifestHead is what HEAD /v2/<name>/manifests/<reference> answers.
type ManifestHead struct {
	// Digest is sha256:<64 hex>, what to pin the image by.
	Digest string
	// MediaType is the manifest's (an image manifest, or an index).
	MediaType string
	// Size is the manifest's length in bytes.
	Size int64
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ImageManifest asks HEAD /v2/<name>/manifests/<reference> with c's token, which must be a grant
// token (WithGrantToken: the shim refuses a pod token there). A refusal is asked again with GET,
// since a HEAD answer has no body, so the *APIError carries the shim's OCI code and message.
func (c *Client) ImageManifest(ctx context.Context, name, reference string) (*ManifestHead, error) {
	path := "/v2/" + name + "/manifests/" + reference
	req, err := c.request(ctx, http.MethodHead, path, nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, headTooLarge(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, c.ociError(ctx, path, resp.StatusCode)
	}
	h := &ManifestHead{
		Digest:    resp.Header.Get("Docker-Content-Digest"),
		MediaType: resp.Header.Get("Content-Type"),
	}
	h.Size, _ = strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if !sha256Digest.MatchString(h.Digest) {
		return nil, &APIError{Status: resp.StatusCode,
			Message: fmt.Sprintf("no sha256 Docker-Content-Digest in the answer (%q)", h.Digest)}
	}
	return h, nil
}

// ociError is the error of a refused HEAD on path: its GET's OCI error body, or the status alone.
func (c *Client) ociError(ctx context.Context, path string, headStatus int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := c.request(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return headTooLarge(err)
	}
	resp.Body = &guardedBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		c.drain(resp)
		return &APIError{Status: headStatus, Message: fmt.Sprintf("HEAD answered %d, GET %d", headStatus, resp.StatusCode)}
	}
	body, cut := c.errorBody(resp)
	var wire struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if !cut && json.Unmarshal(body, &wire) == nil && len(wire.Errors) > 0 {
		return &APIError{Status: resp.StatusCode, Code: wire.Errors[0].Code, Message: wire.Errors[0].Message}
	}
	// Not the registry's body: the shim's own error (an older shim without /v2/), or a proxy's.
	if cut {
		return &APIError{Status: resp.StatusCode, Truncated: true,
			Message: fmt.Sprintf("error body over %d bytes, starting %q", MaxErrorBodyBytes, body[:min(len(body), 256)])}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return c.readAPIError(resp)
}
