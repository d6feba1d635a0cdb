// Files (PROTOCOL.md 4.8): tar streams into and out of the shim's filesystem.

package shim

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Owner is a numeric owner given to every entry of an upload or a pull (PROTOCOL.md 4.8, 4.11):
// on the wire "UID:GID" in a query, {"uid":N,"gid":N} in JSON.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// String is the query form, "UID:GID".
func (o Owner) String() string {
	return strconv.FormatUint(uint64(o.UID), 10) + ":" + strconv.FormatUint(uint64(o.GID), 10)
}

// PutFiles extracts the tar stream r (uncompressed ustar, GNU or pax) under the absolute directory
// dir, creating it if missing. A hostile entry fails the request with 400 invalid_tar.
func (c *Client) PutFiles(ctx context.Context, dir string, r io.Reader) error {
	return c.PutFilesAs(ctx, dir, nil, r)
}

// PutFilesAs is PutFiles with every extracted entry, and every directory the upload creates (dir
// too when it did not exist), owned by owner instead of the tar's owners; nil is PutFiles. An owner
// this shim may not give (a shim without CAP_CHOWN giving another user) is 403 owner_not_permitted
// and nothing is written.
func (c *Client) PutFilesAs(ctx context.Context, dir string, owner *Owner, r io.Reader) error {
	q := url.Values{"path": {dir}}
	if owner != nil {
		q.Set("owner", owner.String())
	}
	return c.putBody(ctx, "/v1/files", q, "application/x-tar", r)
}

// RemoveFiles removes path, a file, a symlink (itself, never its target) or a whole directory
// tree, without following any symlink (PROTOCOL.md 4.8.2). A missing path is 404 file_not_found
// (IsNotFound); a path with a symlink among its components, or "/", is 400 invalid_path.
func (c *Client) RemoveFiles(ctx context.Context, path string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/files", url.Values{"path": {path}}, nil, nil)
	return err
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
