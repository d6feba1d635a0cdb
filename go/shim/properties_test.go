// Tests of properties (PROTOCOL.md 4.13) and Exit.OOMKilled against the real shim: a round trip of
// values of any UTF-8, deletes of absent names, names refused before any request, the shim's count
// and value limits, a grant token refused.

package shim_test

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestPropertiesRoundTrip(t *testing.T) {
	s := startShim(t)
	skipWithoutProperties(t, s)
	ctx := shimtest.Context(t)
	c := s.Client
	got, err := c.Properties(ctx)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty store: %v %v", got, err)
	}
	var odd strings.Builder
	for b := range 0x80 {
		odd.WriteByte(byte(b))
	}
	odd.WriteString("\u2028é😀")
	want := map[string]string{
		"concourse:resource-result": `{"version":{"ref":"abc"},"metadata":[{"name":"m","value":"<&>"}]}`,
		"user":                      "root",
		"empty":                     "",
		"odd":                       odd.String(),
	}
	for k, v := range want {
		if err := c.SetProperty(ctx, k, v); err != nil {
			t.Fatalf("SetProperty %q: %v", k, err)
		}
	}
	if err := c.SetProperty(ctx, "user", "1000"); err != nil {
		t.Fatal(err)
	}
	want["user"] = "1000"
	for _, name := range []string{"empty", "empty", "never-set"} {
		if err := c.DeleteProperty(ctx, name); err != nil {
			t.Fatalf("DeleteProperty %q: %v", name, err)
		}
	}
	delete(want, "empty")
	if got, err := c.Properties(ctx); err != nil || !maps.Equal(got, want) {
		t.Fatalf("Properties = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../processes/x", "a b", "a%3Ab", "é"} {
		if err := c.SetProperty(ctx, bad, "v"); !errors.Is(err, shim.ErrInvalidPropertyName) {
			t.Errorf("SetProperty %q: %v, want ErrInvalidPropertyName", bad, err)
		}
		if err := c.DeleteProperty(ctx, bad); !errors.Is(err, shim.ErrInvalidPropertyName) {
			t.Errorf("DeleteProperty %q: %v, want ErrInvalidPropertyName", bad, err)
		}
	}
	// Over the shim's name length (255 bytes by default): the shim's 400.
	if err := c.SetProperty(ctx, strings.Repeat("n", 256), "v"); !shim.HasCode(err, shim.CodeInvalidProperty) {
		t.Errorf("a 256-byte name: %v", err)
	}
}

func TestPropertiesLimits(t *testing.T) {
	s := startShim(t)
	skipWithoutProperties(t, s)
	ctx := shimtest.Context(t)
	c := s.Client
	// A value over STEPSHIM_PROPERTIES_MAX_VALUE_BYTES (1 MiB by default): 413, nothing stored.
	err := c.SetProperty(ctx, "big", strings.Repeat("x", 1<<20+1))
	if !shim.HasCode(err, shim.CodeBodyTooLarge) {
		t.Fatalf("a value over 1 MiB: %v", err)
	}
	if err := c.SetProperty(ctx, "big", strings.Repeat("x", 1<<20)); err != nil {
		t.Fatalf("a value of 1 MiB: %v", err)
	}
	// STEPSHIM_PROPERTIES_MAX_COUNT (256 by default): the next new name is a conflict, a replaced
	// one is not.
	for i := range 255 {
		if err := c.SetProperty(ctx, "p"+strconv.Itoa(i), "v"); err != nil {
			t.Fatalf("property %d: %v", i, err)
		}
	}
	err = c.SetProperty(ctx, "one-too-many", "v")
	if !shim.IsConflict(err) || !shim.HasCode(err, shim.CodePropertiesFull) {
		t.Fatalf("the 257th name: %v", err)
	}
	if err := c.SetProperty(ctx, "big", "small now"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Properties(ctx)
	if err != nil || len(got) != 256 || got["big"] != "small now" {
		t.Fatalf("%d properties, big=%q, %v", len(got), got["big"], err)
	}
}

func TestPropertiesRefuseGrantTokens(t *testing.T) {
	s := startShim(t)
	skipWithoutProperties(t, s)
	ctx := shimtest.Context(t)
	if err := s.Client.SetProperty(ctx, "secret", "s3cret"); err != nil {
		t.Fatal(err)
	}
	token, _, err := s.Client.Grant(ctx, t.TempDir(), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := s.clientAt(t, s.Addr, token)
	if _, err := g.Properties(ctx); !shim.HasCode(err, shim.CodeForbidden) {
		t.Errorf("Properties with a grant token: %v", err)
	}
	if err := g.SetProperty(ctx, "secret", "x"); !shim.HasCode(err, shim.CodeForbidden) {
		t.Errorf("SetProperty with a grant token: %v", err)
	}
	if err := g.DeleteProperty(ctx, "secret"); !shim.HasCode(err, shim.CodeForbidden) {
		t.Errorf("DeleteProperty with a grant token: %v", err)
	}
	if got, err := s.Client.Properties(ctx); err != nil || got["secret"] != "s3cret" {
		t.Fatalf("after the grant's attempts: %q %v", got, err)
	}
}

// TestExitOOMKilledIsFalseForOtherDeaths: OOMKilled is on the wire for every exit, false for a
// plain exit and a plain SIGKILL (the cluster's 45-oom test sees it true).
func TestExitOOMKilledIsFalseForOtherDeaths(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	for id, script := range map[string]string{"plain": "exit 3", "killed": "kill -KILL $$"} {
		if _, err := s.Client.Run(ctx, id, shim.Spec{Path: "/bin/sh", Args: []string{"-c", script}}); err != nil {
			t.Fatal(err)
		}
		p, err := s.Client.WaitExited(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Exit == nil || p.Exit.OOMKilled || p.Exit.Reason != "" {
			t.Errorf("%s: %+v", id, p.Exit)
		}
	}
}

// skipWithoutProperties skips a test against a shim older than 0.2.0, which keeps no properties
// (PROTOCOL.md 4.13).
func skipWithoutProperties(t *testing.T, s *testShim) {
	t.Helper()
	skipBefore020(t, s, "properties")
}
