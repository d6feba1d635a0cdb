// Wire-level tests of answers a client relies on but cannot provoke through this package's API.

package shim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// TestWireEdges checks answers a client relies on but cannot reach through this package's API.
func TestWireEdges(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	do := func(method, path, body string) (*http.Response, *shim.APIError) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := s.httpClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var wire struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&wire)
		return resp, &shim.APIError{Status: resp.StatusCode, Code: wire.Error.Code}
	}
	if _, e := do("GET", "/v1/nothing", ""); e.Status != 404 || e.Code != shim.CodeNoRoute {
		t.Errorf("unknown route: %+v", e)
	}
	if resp, e := do("PATCH", "/v1/processes/x", ""); e.Status != 405 || e.Code != shim.CodeMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("wrong method: %+v, Allow %q", e, resp.Header.Get("Allow"))
	}
	if _, e := do("PUT", "/v1/processes/x", `{"path":"true","future_field":1}`); e.Status != 400 || e.Code != shim.CodeInvalidJSON {
		t.Errorf("unknown field: %+v", e)
	}
	for _, body := range []string{`{"path":"tr\u0000ue"}`, `{"path":"true","args":["a\u0000"]}`,
		`{"path":"true","env":["A=\u0000"]}`, `{"path":"true","dir":"/tmp/\u0000"}`} {
		_, e := do("PUT", "/v1/processes/x", body)
		if e.Status != 400 || e.Code != shim.CodeInvalidSpec {
			t.Errorf("NUL in %s: %+v", body, e)
		}
		if _, e := do("GET", "/v1/processes/x", ""); e.Status != 404 {
			t.Errorf("NUL in %s: the refused spawn was recorded", body)
		}
	}
	if _, e := do("GET", "/v1/processes/..", ""); e.Status != 400 || e.Code != shim.CodeInvalidID {
		t.Errorf("id ..: %+v", e)
	}
	if _, e := do("PUT", "/v1/processes/u", `{"path":"true","user":"no-such-user-here"}`); e.Status != 422 || e.Code != shim.CodeInvalidSpawn {
		t.Errorf("unknown user: %+v", e)
	}
	if _, e := do("GET", "/v1/processes/u", ""); e.Status != 404 {
		t.Errorf("a refused spawn was recorded: %+v", e)
	}
	if resp, e := do("GET", "/v1/info", ""); e.Status != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("info content type %q", resp.Header.Get("Content-Type"))
	}
}
