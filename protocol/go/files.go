// Files (PROTOCOL.md 4.8): tar streams into and out of the shim's filesystem.

package shim

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// PutFiles extracts the tar stream r (uncompressed ustar, GNU or pax) under the absolute directory
// dir, creating it if missing. A hostile entry fails the request with 400 invalid_tar.
func (c *Client) PutFiles(ctx context.Context, dir string, r io.Reader) error {
	req, err := c.request(ctx, http.MethodPut, "/v1/files", url.Values{"path": {dir}}, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.drain(resp)
	return nil
}

// GetFiles writes a tar stream of path to w: of a directory's contents (paths "./a", ...) if path
// names a directory and ends with "/", else one entry named after path's last component. A missing
// path is 404 file_not_found. If the shim fails midway the stream breaks and GetFiles returns an
// error; what was written to w is then a truncated archive.
func (c *Client) GetFiles(ctx context.Context, path string, w io.Writer) error {
	rc, err := c.OpenFiles(ctx, path)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// OpenFiles is GetFiles as a reader; the caller closes it.
func (c *Client) OpenFiles(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := c.request(ctx, http.MethodGet, "/v1/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
