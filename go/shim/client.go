// Client: the base URL, the bearer token and the HTTP client, the request plumbing every route shares,
// and the shim-wide routes that are one request each (healthz, info, metrics); the process routes
// are in processes.go.

package shim

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ProxyTokenHeader carries the bare token where Authorization cannot: the apiserver's pods/proxy keeps
// Authorization (the caller's Kubernetes credentials) for itself and passes this header on
// (PROTOCOL.md section 2).
const ProxyTokenHeader = "X-Stepshim-Token"

// Client talks to one shim. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	// viaProxy puts the token in ProxyTokenHeader instead of Authorization.
	viaProxy bool
	// pin is the shim's TLS pin for a client made by NewTLS, else empty.
	pin string
	// HTTP sends the requests. It must have no overall Timeout: output streams and waits are long.
	HTTP *http.Client
	// Backoff bounds the waits between retries of the resuming loops; zero values mean 50ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	// FollowIdle is how long Follow waits for a byte before it takes the connection for dead and
	// resumes on a new one; zero means 30s, three keepalive intervals of the shim.
	FollowIdle time.Duration
	// MaxAnswerBytes bounds one JSON answer and the metrics; zero means DefaultMaxAnswerBytes, which
	// holds the largest answers of a shim at its default limits. A longer answer is a *LimitError.
	MaxAnswerBytes int64
	// AnswerTimeout bounds the time from the head of a JSON answer, the metrics or an error answer
	// to its end; zero means DefaultAnswerTimeout. A slower answer is a *StallError.
	AnswerTimeout time.Duration
}

// New returns a Client for the shim at baseURL (e.g. "http://10.0.0.7:7777") presenting token.
// Its HTTP client has no overall timeout, a dial timeout and TCP keepalives; Go sets TCP_NODELAY.
// Answer heads are bounded by MaxHeaderBytes. A shim serving TLS is reached with NewTLS.
func New(baseURL, token string) (*Client, error) {
	u, err := parseBase(baseURL, "http")
	if err != nil {
		return nil, err
	}
	return &Client{base: u, token: token, HTTP: &http.Client{Transport: newTransport(nil)}}, nil
}

// parseBase checks a direct base URL: scheme://host:port with nothing after but an optional path.
func parseBase(baseURL, scheme string) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("shim: base URL: %w", err)
	}
	if u.Scheme != scheme || u.Host == "" {
		hint := ""
		if u.Scheme == "https" {
			hint = " (a TLS shim is reached with NewTLS and its pin)"
		}
		return nil, fmt.Errorf("shim: base URL %q: want %s://host:port%s", baseURL, scheme, hint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// newTransport is the transport of a direct client; tlsConfig is nil for plain HTTP. A transport
// with its own TLS configuration speaks HTTP/1.1 only, as the shim does.
func newTransport(tlsConfig *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	return &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// Go's default is 10 MiB.
		MaxResponseHeaderBytes: MaxHeaderBytes,
	}
}

// NewViaProxy returns a Client that reaches the shim through a proxy: every request goes to baseURL
// (http or https, with a path such as the apiserver's
// "https://host:6443/api/v1/namespaces/NS/pods/POD:7777/proxy") joined with the route, is sent by rt
// (which adds the proxy's own credentials, e.g. client-go's rest.TransportFor), and carries token
// in ProxyTokenHeader, because the proxy keeps Authorization for itself.
func NewViaProxy(baseURL string, rt http.RoundTripper, token string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("shim: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("shim: base URL %q: want http(s)://host[:port][/path]", baseURL)
	}
	if rt == nil {
		return nil, fmt.Errorf("shim: NewViaProxy without a RoundTripper")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{base: u, token: token, viaProxy: true, HTTP: &http.Client{Transport: rt}}, nil
}

// validID checks an id against [A-Za-z0-9._-]{1,128}, not "." or "..", so that it is safe in a path.
func validID(id string) error {
	if len(id) == 0 || len(id) > 128 || id == "." || id == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q", ErrInvalidID, id)
		}
	}
	return nil
}

// request builds a request for path and query; body may be nil.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if c.viaProxy {
		req.Header.Set(ProxyTokenHeader, c.token)
	} else {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send sends req and turns a non-2xx answer into an *APIError. The caller closes the body of a 2xx,
// which ends the request's context (see guardedBody).
func (c *Client) send(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	resp, err := c.HTTP.Do(req.WithContext(ctx))
	if err != nil {
		cancel(nil)
		return nil, headTooLarge(err)
	}
	resp.Body = &guardedBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, c.readAPIError(resp)
	}
	return resp, nil
}

// putBody sends body to path with PUT as contentType and drains the answer: an upload whose
// success answer carries nothing.
func (c *Client) putBody(ctx context.Context, path string, q url.Values, contentType string, body io.Reader) error {
	req, err := c.request(ctx, http.MethodPut, path, q, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.drain(resp)
	return nil
}

// doJSON sends a request with an optional JSON body and decodes a JSON answer of at most
// MaxAnswerBytes into out (if non-nil). It returns the status of a 2xx answer. An answer that never
// ends is ended by ctx, or by the limit if its bytes keep coming.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil {
		c.drain(resp)
		return resp.StatusCode, nil
	}
	if err := c.decodeJSON(resp, "the answer of "+method+" "+path, out); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// Healthz asks GET /healthz (no token): nil while the shim serves, an error (503 while it shuts down) otherwise.
func (c *Client) Healthz(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := c.request(ctx, http.MethodGet, "/healthz", nil, nil)
	if err != nil {
		return err
	}
	req.Header.Del("Authorization")
	req.Header.Del(ProxyTokenHeader)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return headTooLarge(err)
	}
	resp.Body = &guardedBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel}
	defer resp.Body.Close()
	c.drain(resp)
	if resp.StatusCode != http.StatusOK {
		return &APIError{Status: resp.StatusCode, Message: "not healthy"}
	}
	return nil
}

// Info returns the shim's protocol version, release and boot id.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var info Info
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/info", nil, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Metrics returns the shim's metrics in Prometheus text format, at most MaxAnswerBytes of them.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	req, err := c.request(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.send(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := c.readWhole(resp, "the metrics")
	return string(b), err
}
