// Artifacts between shims (PROTOCOL.md 4.8.1, 4.10, 4.11): read grants, pulls and the resumable
// files stream (package atcruntime builds ATC-shaped volumes on them).

package shim

import (
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
	// Busy counts the source's 503 answers (its transfer slots all taken) the pull waited out;
	// Waiting says it waits for that source now. A 0.1 shim sends neither.
	Busy    uint32 `json:"busy"`
	Waiting bool   `json:"waiting"`
	SHA256  string `json:"sha256,omitempty"`
	Entries uint64 `json:"entries,omitempty"`
	Error   string `json:"error,omitempty"`
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
