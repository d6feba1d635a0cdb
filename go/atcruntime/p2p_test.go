// P2P URLs (signing, ATC's appended parameters, tampering, expiry, another worker's key) and P2P
// copies between real shims, made by another store than the one that signed (another web node),
// with ATC's limit honoured before anything moves.

package atcruntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// atcAppendLimit is what ATC's streamer does to a URL before StreamP2POut (atc/worker/streamer.go):
// parse, add limit=<MB> in %f, encode the query again.
func atcAppendLimit(t *testing.T, raw string, mb float64) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Add("limit", fmt.Sprintf("%f", mb))
	u.RawQuery = q.Encode()
	return u.String()
}

func TestP2PURLSigning(t *testing.T) {
	lp := newLocalPods(t, "w1")
	signer := newSigner(lp, time.Minute)
	now := time.Unix(1_800_000_000, 0)
	raw := signer.sign(p2pTarget{Pod: "step-b", Path: "/tmp/build/in put"}, now)
	if strings.Contains(raw, lp.Token("step-b")) {
		t.Fatal("the URL carries the pod's token")
	}
	got, err := signer.verify(raw, now.Add(30*time.Second))
	if err != nil || got.Pod != "step-b" || got.Path != "/tmp/build/in put" || got.Limit != 0 {
		t.Fatalf("verify: %+v, %v", got, err)
	}
	// ATC appends ?limit=; other parameters are ignored.
	withLimit := atcAppendLimit(t, raw, 2.5) + "&trace=abc"
	if got, err = signer.verify(withLimit, now); err != nil || got.Limit != int64(2.5*1024*1024) {
		t.Fatalf("with limit: %+v, %v", got, err)
	}
	// A process with the same key (another web node) accepts it; another worker's key does not.
	if _, err := newSigner(lp, 0).verify(raw, now); err != nil {
		t.Fatalf("another node: %v", err)
	}
	if _, err := newSigner(newLocalPods(t, "w2"), 0).verify(raw, now); !errors.Is(err, ErrP2PURL) {
		t.Fatalf("another worker's key: %v", err)
	}
	u, _ := url.Parse(raw)
	tamper := func(f func(u *url.URL, q url.Values)) string {
		c := *u
		q := c.Query()
		f(&c, q)
		c.RawQuery = q.Encode()
		return c.String()
	}
	bad := map[string]string{
		"expired":        raw,
		"other pod":      tamper(func(u *url.URL, q url.Values) { u.Host = "step-c" }),
		"other path":     tamper(func(u *url.URL, q url.Values) { q.Set("path", "/etc") }),
		"later expiry":   tamper(func(u *url.URL, q url.Values) { q.Set("expires", "1900000000") }),
		"bad signature":  tamper(func(u *url.URL, q url.Values) { q.Set("sig", strings.Repeat("0", 64)) }),
		"two paths":      tamper(func(u *url.URL, q url.Values) { q.Add("path", "/etc") }),
		"no signature":   tamper(func(u *url.URL, q url.Values) { q.Del("sig") }),
		"other scheme":   tamper(func(u *url.URL, q url.Values) { u.Scheme = "http" }),
		"relative path":  tamper(func(u *url.URL, q url.Values) { q.Set("path", "tmp/../x") }),
		"negative limit": tamper(func(u *url.URL, q url.Values) { q.Set("limit", "-1") }),
		"bad limit":      tamper(func(u *url.URL, q url.Values) { q.Set("limit", "lots") }),
		"not a URL":      "http://[::1",
	}
	for what, s := range bad {
		at := now
		if what == "expired" {
			at = now.Add(61 * time.Second)
		}
		if _, err := signer.verify(s, at); err == nil {
			t.Errorf("%s: %s accepted", what, s)
		}
	}
}

func TestStreamP2POut(t *testing.T) {
	files := sampleTree()
	lp, web1, src := twoPods(t, files)
	web2 := newStore(lp, VolumeConfig{})
	ctx := testCtx(t)
	dst := t.TempDir()
	// The destination's URL comes from one node; another node streams to it (ATC's default zstd).
	raw, err := web1.podVolume("step-b", dst).GetStreamInP2PURL(ctx, "sub")
	if err != nil {
		t.Fatal(err)
	}
	if err := web2.podVolume("step-a", src).StreamP2POut(ctx, ".", atcAppendLimit(t, raw, 10), Zstd); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, dst+"/sub"))
	// Over the limit: refused before anything moves.
	dst2 := t.TempDir()
	raw2, _ := web1.podVolume("step-b", dst2).GetStreamInP2PURL(ctx, ".")
	err = web2.podVolume("step-a", src).StreamP2POut(ctx, ".", atcAppendLimit(t, raw2, 0.1), Raw)
	var lim *StreamLimitError
	if !errors.As(err, &lim) {
		t.Fatalf("over the limit: %v, want a StreamLimitError", err)
	}
	if entries, _ := os.ReadDir(dst2); len(entries) != 0 {
		t.Fatalf("over the limit moved %v", entries)
	}
	// A URL of another worker is refused.
	other, _ := testStore(t, newLocalPods(t, "w2"))
	raw3, _ := other.podVolume("step-b", dst2).GetStreamInP2PURL(ctx, ".")
	if err := web2.podVolume("step-a", src).StreamP2POut(ctx, ".", raw3, Raw); !errors.Is(err, ErrP2PURL) {
		t.Fatalf("another worker's URL: %v", err)
	}
}

// plainArtifact is an artifact that is not a volume of the worker (as an ATC artifact of another
// runtime): its bytes come through StreamOut.
type plainArtifact struct{ tarBytes []byte }

func (a plainArtifact) StreamOut(_ context.Context, _ string, c Compression) (io.ReadCloser, error) {
	if c != Raw {
		return nil, ErrCompression
	}
	return io.NopCloser(bytes.NewReader(a.tarBytes)), nil
}
func (a plainArtifact) Handle() string { return "elsewhere/1" }
func (a plainArtifact) Source() string { return "another-worker" }

func TestStreamInput(t *testing.T) {
	files := sampleTree()
	_, s, src := twoPods(t, files)
	ctx := testCtx(t)
	dst := t.TempDir()
	if err := s.streamInput(ctx, s.podVolume("step-b", dst+"/in"), s.podVolume("step-a", src), nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, dst+"/in"))
	tarBytes := streamOut(ctx, t, s.podVolume("step-a", src), ".", Raw)
	if err := s.streamInput(ctx, s.podVolume("step-b", dst+"/in2"), plainArtifact{tarBytes}, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, files, readTree(t, dst+"/in2"))
	// Owned by the task's user, both ways, as Garden's input volumes are.
	if os.Geteuid() != 0 {
		t.Skip("owners other than the shim's own need root")
	}
	task := &shim.Owner{UID: 65534, GID: 65533}
	if err := s.streamInput(ctx, s.podVolume("step-b", dst+"/own"), s.podVolume("step-a", src), task); err != nil {
		t.Fatal(err)
	}
	if err := s.streamInput(ctx, s.podVolume("step-b", dst+"/own2"), plainArtifact{tarBytes}, task); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{dst + "/own", dst + "/own2"} {
		n := 0
		err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != task.UID || st.Gid != task.GID {
				return fmt.Errorf("%s is %d:%d, want %d:%d", p, st.Uid, st.Gid, task.UID, task.GID)
			}
			n++
			return nil
		})
		if err != nil || n < 2 {
			t.Fatalf("%s: %v (%d entries)", root, err, n)
		}
	}
}

// TestP2PURLLimit: a `limit` keeps ATC's meaning when it is one finite number within bounds (0, as
// ATC's "%f" writes it, is no limit) and refuses the URL otherwise, never turning into no limit.
func TestP2PURLLimit(t *testing.T) {
	signer := newSigner(newLocalPods(t, "w1"), time.Minute)
	now := time.Unix(1_800_000_000, 0)
	raw := signer.sign(p2pTarget{Pod: "step-b", Path: "/tmp/build/out"}, now)
	with := func(values ...string) string {
		u, _ := url.Parse(raw)
		q := u.Query()
		for _, v := range values {
			q.Add("limit", v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for value, want := range map[string]int64{
		"0.000000":     0,
		"0":            0,
		"2.500000":     int64(2.5 * 1024 * 1024),
		"1":            1 << 20,
		"0.000001":     1,
		"1048576":      1 << 40,
		"1073741824.0": 1 << 50,
	} {
		got, err := signer.verify(with(value), now)
		if err != nil || got.Limit != want {
			t.Errorf("limit=%s: %+v, %v; want %d bytes", value, got, err, want)
		}
	}
	for what, values := range map[string][]string{
		"infinite":             {"Inf"},
		"infinite, signed":     {"+Inf"},
		"infinity spelled out": {"infinity"},
		"not a number":         {"NaN"},
		"past int64 bytes":     {"1e13"},
		"past the bound":       {"1073741825"},
		"under one byte":       {"0.0000001"},
		"repeated":             {"1", "2"},
		"repeated, same":       {"1", "1"},
		"negative":             {"-1"},
		"negative zero":        {"-0"},
		"hexadecimal":          {"0x1p4"},
		"empty":                {""},
		"words":                {"lots"},
	} {
		got, err := signer.verify(with(values...), now)
		if !errors.Is(err, ErrP2PURL) {
			t.Errorf("%s (limit=%q): %+v, %v; want ErrP2PURL", what, values, got, err)
		} else if !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: %v does not name the limit", what, err)
		}
	}
}
