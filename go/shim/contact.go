// Contact: when a shim last answered. A caller that must tell a slow shim from a lost one (a node
// gone, its network cut) gives every client of one shim the same Contact; each answer's head and
// each read of an answer's body (an output stream's keepalives included, at least every 10 s while
// a follow is idle) marks it; a 5xx answer does not (through the apiserver's proxy it may be the
// apiserver's own, for a pod it cannot reach).

package shim

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Contact is the time a shim last answered. Safe for concurrent use; the zero value has never seen
// an answer.
type Contact struct{ unixNano atomic.Int64 }

// NewContact is a Contact marked now (a shim just found is taken as answering).
func NewContact() *Contact {
	c := &Contact{}
	c.Mark()
	return c
}

// Mark records an answer now.
func (c *Contact) Mark() { c.unixNano.Store(time.Now().UnixNano()) }

// Last is when the shim last answered; the zero Time if it never did.
func (c *Contact) Last() time.Time {
	n := c.unixNano.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// TrackContact makes every answer c receives from now on mark ct: c's transport is wrapped.
func (c *Client) TrackContact(ct *Contact) {
	next := c.HTTP.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc := *c.HTTP
	hc.Transport = contactTransport{next: next, ct: ct}
	c.HTTP = &hc
}

type contactTransport struct {
	next http.RoundTripper
	ct   *Contact
}

func (t contactTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	// A 5xx may be a proxy's (the apiserver's, for a pod it cannot reach), not the shim's.
	if err == nil && resp.StatusCode < 500 {
		t.ct.Mark()
		resp.Body = contactBody{ReadCloser: resp.Body, ct: t.ct}
	}
	return resp, err
}

type contactBody struct {
	io.ReadCloser
	ct *Contact
}

func (b contactBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.ct.Mark()
	}
	return n, err
}
