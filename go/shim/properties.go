// Properties (PROTOCOL.md 4.13): a small key/value store per shim, in its memory only, that the
// step's processes cannot see; what a Garden container's properties are to Concourse.

package shim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// DefaultMaxPropertiesAnswerBytes bounds the answer of Properties unless Client.MaxAnswerBytes is
// larger: the largest legitimate answer at the shim's defaults (STEPSHIM_PROPERTIES_MAX_BYTES 4 MiB
// of names and values, every value byte a control character JSON escapes in 6 bytes, and 256 names)
// is 6 x 4 MiB + 6 x 256 + 2 bytes. A value of JSON text takes little more than its own size.
const DefaultMaxPropertiesAnswerBytes = 6*(4<<20) + 6*256 + 2

// ErrInvalidPropertyName is returned, before any request, for a property name the protocol does not
// allow: one outside [A-Za-z0-9._:-]+, or "." or "..". (Its length is the shim's setting: a name
// over it answers 400 invalid_property.)
var ErrInvalidPropertyName = errors.New("invalid property name")

func propertyPath(name string) (string, error) {
	ok := name != "" && name != "." && name != ".."
	for _, c := range []byte(name) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':')
	}
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrInvalidPropertyName, name)
	}
	return "/v1/properties/" + name, nil
}

// Properties returns every property of the shim, name to value (an empty map when there is none).
func (c *Client) Properties(ctx context.Context) (map[string]string, error) {
	req, err := c.request(ctx, http.MethodGet, "/v1/properties", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	const what = "the answer of GET /v1/properties"
	b, err := c.readWholeUpTo(resp, what, max(c.maxAnswer(), DefaultMaxPropertiesAnswerBytes))
	if err != nil {
		return nil, err
	}
	props := map[string]string{}
	if err := unmarshal(b, what, &props); err != nil {
		return nil, err
	}
	return props, nil
}

// SetProperty sets the property name to value (which must be UTF-8), replacing any value it had. A
// value over the shim's STEPSHIM_PROPERTIES_MAX_VALUE_BYTES answers 413 body_too_large; a store
// full by count or bytes, 409 properties_full (IsConflict).
func (c *Client) SetProperty(ctx context.Context, name, value string) error {
	path, err := propertyPath(name)
	if err != nil {
		return err
	}
	return c.putBody(ctx, path, nil, "text/plain; charset=utf-8", strings.NewReader(value))
}

// DeleteProperty removes the property name; a name that is not set is no error.
func (c *Client) DeleteProperty(ctx context.Context, name string) error {
	path, err := propertyPath(name)
	if err != nil {
		return err
	}
	_, err = c.doJSON(ctx, http.MethodDelete, path, nil, nil, nil)
	return err
}
