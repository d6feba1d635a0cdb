// The length of a files stream before reading it (PROTOCOL.md 4.8.1): what a caller that must refuse
// a tree over a size learns without moving its bytes.

package shim

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// FilesLength is the length in bytes of the tar stream GET /v1/files?path=P would answer, and its
// ETag, read from the answer's headers (X-Stepshim-Stream-Length, ETag); the body is not read. The
// shim walks the tree without reading contents to answer. A missing path is 404 (IsNotFound).
func (c *Client) FilesLength(ctx context.Context, path string) (length int64, etag string, err error) {
	req, err := c.request(ctx, http.MethodGet, "/v1/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, "", err
	}
	_ = resp.Body.Close()
	raw := resp.Header.Get("X-Stepshim-Stream-Length")
	length, err = strconv.ParseInt(raw, 10, 64)
	if err != nil || length < 0 {
		return 0, "", fmt.Errorf("shim: files stream of %s without a valid X-Stepshim-Stream-Length (%q)", path, raw)
	}
	return length, strings.Trim(resp.Header.Get("ETag"), `"`), nil
}
