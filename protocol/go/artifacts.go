// Artifacts between shims (PROTOCOL.md 4.8.1, 4.10, 4.11): read grants, pulls, the resumable files
// stream, and the shapes Concourse ATC's runtime uses for volumes: StreamOut, StreamIn and the P2P
// pair GetStreamInP2PURL / StreamP2POut, the latter done as a pull by the destination shim with a
// grant on the source, so the bytes never pass through the caller.
//
// Compression. ATC streams gzip or zstd because its bytes cross the web node; here the shims always
// move an uncompressed tar. Identity is the default and what a pull uses. Gzip is accepted: for
// StreamOut the client compresses what it reads, for StreamIn it decompresses before the upload; the
// CPU is the caller's. Measured with compress/gzip at the default level on one core of a shared
// 2-core EPYC VM: 36 MB/s on random bytes (output 100% of input) and 21 MB/s on Rust sources (28%).
// Both are far below a pod network (1 Gbit/s is 125 MB/s), so gzip only pays on a link slower than
// about 20 MB/s with compressible data (e.g. a worker reaching pods through a remote apiserver). A
// P2P copy is a pull between two shims and stays identity whatever compression asks. Zstd is not
// in Go's standard library and is refused with ErrCompression.

package shim

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GrantRequest is the body of POST /v1/grants.
type GrantRequest struct {
	Path        string  `json:"path"`
	TokenSHA256 string  `json:"token_sha256"`
	TTLSeconds  uint64  `json:"ttl_seconds"`
	Uses        *uint64 `json:"uses,omitempty"`
}

// Grant is a grant as the shim reports it (never with its token's hash).
type Grant struct {
	ID               string  `json:"id"`
	Path             string  `json:"path"`
	ExpiresInSeconds uint64  `json:"expires_in_seconds"`
	UsesLeft         *uint64 `json:"uses_left,omitempty"`
	Used             uint64  `json:"used"`
}

// PullSpec is the body of PUT /v1/pulls/{id}.
type PullSpec struct {
	// Source is http://IP:PORT, or https://IP:PORT for a source serving TLS.
	Source string `json:"source"`
	// SourcePin is the TLS pin of an https source (TLSPin; Client.Pin of a client made by NewTLS),
	// empty for an http one.
	SourcePin string `json:"source_pin,omitempty"`
	Path      string `json:"path"`
	Token     string `json:"token"`
	Target    string `json:"target"`
	SHA256    string `json:"sha256,omitempty"`
	// ConnectRetries, when set, bounds the retries (failed attempts after the first: 2 makes at
	// most 3 attempts) before the source first answers (at most the shim's STEPSHIM_PULL_RETRIES,
	// its default).
	ConnectRetries *uint32 `json:"connect_retries,omitempty"`
	// Owner, when set, owns every pulled entry and every directory the pull creates, as
	// PutFilesAs.
	Owner *Owner `json:"owner,omitempty"`
}

// Pull states.
const (
	PullRunning = "running"
	PullDone    = "done"
	PullFailed  = "failed"
)

// PullStatus is what GET /v1/pulls/{id} answers.
type PullStatus struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	Source         string `json:"source"`
	Path           string `json:"path"`
	Target         string `json:"target"`
	Bytes          uint64 `json:"bytes"`
	Total          uint64 `json:"total,omitempty"`
	BytesPerSecond uint64 `json:"bytes_per_second"`
	Resumes        uint32 `json:"resumes"`
	Reached        bool   `json:"reached"`
	SHA256         string `json:"sha256,omitempty"`
	Entries        uint64 `json:"entries,omitempty"`
	Error          string `json:"error,omitempty"`
}

// WithGrantToken returns a copy of c presenting a grant token: it may only GET /v1/files under the
// grant's path.
func (c *Client) WithGrantToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// BaseURL is the shim's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// Grant registers a grant on path for ttl (and at most uses requests if uses > 0) with a fresh random
// token, which it returns with the grant; the shim keeps only its SHA-256.
func (c *Client) Grant(ctx context.Context, path string, ttl time.Duration, uses uint64) (string, *Grant, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, err
	}
	token := hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))
	req := GrantRequest{Path: path, TokenSHA256: hex.EncodeToString(sum[:]), TTLSeconds: uint64(max(ttl.Seconds(), 1))}
	if uses > 0 {
		req.Uses = &uses
	}
	g := new(Grant)
	if _, err := c.doJSON(ctx, http.MethodPost, "/v1/grants", nil, req, g); err != nil {
		return "", nil, err
	}
	return token, g, nil
}

// Grants lists the grants not revoked.
func (c *Client) Grants(ctx context.Context) ([]Grant, error) {
	var list struct {
		Grants []Grant `json:"grants"`
	}
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/grants", nil, nil, &list)
	return list.Grants, err
}

// RevokeGrant deletes grant id.
func (c *Client) RevokeGrant(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/grants/"+id, nil, nil, nil)
	return err
}

// Pull starts pull id (or finds the same one: created is false) and waits up to wait for it to end.
func (c *Client) Pull(ctx context.Context, id string, spec PullSpec, wait time.Duration) (p *PullStatus, created bool, err error) {
	if err := validID(id); err != nil {
		return nil, false, err
	}
	p = new(PullStatus)
	status, err := c.doJSON(ctx, http.MethodPut, "/v1/pulls/"+id, waitQuery(wait), spec, p)
	return p, status == http.StatusCreated, err
}

// PullStatus reports pull id, waiting up to wait for it to end.
func (c *Client) PullStatus(ctx context.Context, id string, wait time.Duration) (*PullStatus, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	p := new(PullStatus)
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/pulls/"+id, waitQuery(wait), nil, p)
	return p, err
}

// WaitPull waits for pull id to end (in steps of at most 60 s) and returns an error if it failed.
func (c *Client) WaitPull(ctx context.Context, id string) (*PullStatus, error) {
	for {
		p, err := c.PullStatus(ctx, id, 60*time.Second)
		if err != nil {
			return nil, err
		}
		switch p.State {
		case PullDone:
			return p, nil
		case PullFailed:
			return p, fmt.Errorf("shim: pull %s failed: %s", id, p.Error)
		}
	}
}

// Pulls lists the pulls.
func (c *Client) Pulls(ctx context.Context) ([]PullStatus, error) {
	var list struct {
		Pulls []PullStatus `json:"pulls"`
	}
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/pulls", nil, nil, &list)
	return list.Pulls, err
}

// DeletePull cancels pull id if it runs (nothing is moved into place) and forgets it.
func (c *Client) DeletePull(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/pulls/"+id, nil, nil, nil)
	return err
}

func waitQuery(wait time.Duration) url.Values {
	if wait <= 0 {
		return nil
	}
	return url.Values{"wait": {strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)}}
}

// OpenFilesResumable is OpenFiles that survives cut connections: on a read error it asks again from
// the bytes it has with the stream's ETag (at most 8 times in a row without progress), so the caller
// reads one uninterrupted stream. A tree changed meanwhile fails with 412 precondition_failed.
func (c *Client) OpenFilesResumable(ctx context.Context, path string) (io.ReadCloser, error) {
	r := &resumingReader{ctx: ctx, c: c, path: path}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

type resumingReader struct {
	ctx      context.Context
	c        *Client
	path     string
	body     io.ReadCloser
	etag     string
	got      int64
	failures int
}

func (r *resumingReader) open() error {
	q := url.Values{"path": {r.path}}
	if r.got > 0 {
		q.Set("offset", strconv.FormatInt(r.got, 10))
		q.Set("etag", r.etag)
	}
	req, err := r.c.request(r.ctx, http.MethodGet, "/v1/files", q, nil)
	if err != nil {
		return err
	}
	resp, err := r.c.send(req)
	if err != nil {
		return err
	}
	r.etag = strings.Trim(resp.Header.Get("ETag"), `"`)
	r.body = resp.Body
	return nil
}

func (r *resumingReader) Read(p []byte) (int, error) {
	for {
		n, err := r.body.Read(p)
		r.got += int64(n)
		if n > 0 {
			r.failures = 0
		}
		if err == nil || err == io.EOF || n > 0 {
			return n, err
		}
		_ = r.body.Close()
		var api *APIError
		for {
			r.failures++
			if r.failures > 8 || r.ctx.Err() != nil {
				return 0, fmt.Errorf("shim: files stream of %s lost at byte %d: %w", r.path, r.got, err)
			}
			time.Sleep(time.Duration(r.failures) * 100 * time.Millisecond)
			if err = r.open(); err == nil {
				break
			}
			if errors.As(err, &api) && api.Status != http.StatusServiceUnavailable {
				return 0, err
			}
		}
	}
}

func (r *resumingReader) Close() error { return r.body.Close() }

// Compression of a volume stream, as ATC names them.
type Compression string

// The encodings.
const (
	Identity Compression = "raw"
	Gzip     Compression = "gzip"
	Zstd     Compression = "zstd"
)

// ErrCompression is returned for an encoding this client does not implement.
var ErrCompression = errors.New("shim: unsupported compression")

// Volume is a directory of one shim seen as an ATC volume.
type Volume struct {
	Client *Client
	// Root is the volume's absolute directory; paths given to the methods are relative to it.
	Root string
}

func (v *Volume) join(path string) string {
	p := strings.TrimSuffix(v.Root, "/") + "/" + strings.TrimPrefix(path, "/")
	if path == "" || path == "." || strings.HasSuffix(path, "/") {
		return strings.TrimSuffix(p, "/") + "/"
	}
	return p
}

// StreamOut returns a tar stream of path (its contents when path is "." or ends with "/") in the
// given compression, resumed after cut connections.
func (v *Volume) StreamOut(ctx context.Context, path string, compression Compression) (io.ReadCloser, error) {
	rc, err := v.Client.OpenFilesResumable(ctx, v.join(path))
	if err != nil {
		return nil, err
	}
	switch compression {
	case Identity, "":
		return rc, nil
	case Gzip:
		pr, pw := io.Pipe()
		go func() {
			zw := gzip.NewWriter(pw)
			_, err := io.Copy(zw, rc)
			if cerr := zw.Close(); err == nil {
				err = cerr
			}
			_ = rc.Close()
			pw.CloseWithError(err)
		}()
		return pr, nil
	default:
		_ = rc.Close()
		return nil, fmt.Errorf("%w: %q", ErrCompression, compression)
	}
}

// StreamIn extracts the tar stream r (in the given compression) under path.
func (v *Volume) StreamIn(ctx context.Context, path string, compression Compression, r io.Reader) error {
	switch compression {
	case Identity, "":
		return v.Client.PutFiles(ctx, v.join(path), r)
	case Gzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		return v.Client.PutFiles(ctx, v.join(path), zr)
	default:
		return fmt.Errorf("%w: %q", ErrCompression, compression)
	}
}

// p2pTargets maps the nonce of a URL GetStreamInP2PURL gave to its destination volume: ATC asks the
// destination for a URL and hands it to the source in the same process.
var p2pTargets sync.Map

// GetStreamInP2PURL returns a URL naming this volume's path as a P2P destination, for StreamP2POut
// on the source volume (in this process, within ten minutes). A runtime with several processes uses
// package atcruntime of the Go kit instead, whose URLs any process holding the worker's key acts on.
func (v *Volume) GetStreamInP2PURL(ctx context.Context, path string) (string, error) {
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	nonce := hex.EncodeToString(raw[:])
	p2pTargets.Store(nonce, &Volume{Client: v.Client, Root: v.join(path)})
	time.AfterFunc(10*time.Minute, func() { p2pTargets.Delete(nonce) })
	u := *v.Client.base
	u.Path += "/v1/pulls/p2p-" + nonce
	return u.String(), nil
}

// StreamP2POut streams path of this volume to the destination named by destURL: it grants the
// destination shim read access to path for ten minutes, has it pull (identity on the wire whatever
// compression says, see the file comment) and waits for the pull to end. A source reached by NewTLS
// is pulled over TLS with its pin.
func (v *Volume) StreamP2POut(ctx context.Context, path, destURL string, compression Compression) error {
	if compression != Identity && compression != Gzip && compression != "" {
		return fmt.Errorf("%w: %q", ErrCompression, compression)
	}
	// Parameters a caller appended (ATC adds ?limit=) do not name the destination.
	u, err := url.Parse(destURL)
	i := -1
	if err == nil {
		i = strings.LastIndex(u.Path, "/p2p-")
	}
	if i < 0 {
		return fmt.Errorf("shim: %q is not a URL from GetStreamInP2PURL", destURL)
	}
	nonce := u.Path[i+len("/p2p-"):]
	d, ok := p2pTargets.LoadAndDelete(nonce)
	if !ok {
		return fmt.Errorf("shim: P2P destination %q is unknown or expired", destURL)
	}
	dest := d.(*Volume)
	src := v.join(path)
	token, g, err := v.Client.Grant(ctx, strings.TrimSuffix(src, "/"), 10*time.Minute, 0)
	if err != nil {
		return err
	}
	defer func() { _ = v.Client.RevokeGrant(context.WithoutCancel(ctx), g.ID) }()
	id := "p2p-" + nonce
	spec := PullSpec{Source: v.Client.BaseURL(), SourcePin: v.Client.Pin(), Path: src, Token: token,
		Target: strings.TrimSuffix(dest.Root, "/")}
	if _, _, err := dest.Client.Pull(ctx, id, spec, 60*time.Second); err != nil {
		return err
	}
	_, err = dest.Client.WaitPull(ctx, id)
	return err
}
