// Volumes against real shims: StreamOut/StreamIn round trips in every encoding, the limit on the
// decompressed tar (all or nothing), single files, and refused encodings and paths.

package atcruntime

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// writeTree writes files (relative name -> contents) under dir.
func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree is every regular file under dir, by relative name.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			b, err := os.ReadFile(p)
			out[rel] = b
			return err
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, want, got map[string][]byte) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("tree has %d files %v, want %d %v", len(got), keys(got), len(want), keys(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("file %s: %d bytes, want %d (or contents differ)", k, len(got[k]), len(v))
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func sampleTree() map[string][]byte {
	return map[string][]byte{
		"a.txt":            []byte("hello"),
		"dir/b.go":         bytes.Repeat([]byte("package main // text compresses\n"), 2000),
		"dir/deep/c.bin":   randomBytes(200 << 10),
		"dir/deep/empty.x": {},
	}
}

func TestStreamRoundTripsEveryEncoding(t *testing.T) {
	files := sampleTree()
	_, s, src := twoPods(t, files)
	ctx := testCtx(t)
	for _, c := range []Compression{Raw, Gzip, Zstd, S2, ""} {
		t.Run(string(c)+"_", func(t *testing.T) {
			dst := t.TempDir()
			raw := streamOut(ctx, t, s.podVolume("step-a", src), ".", c)
			// The stream really is in the encoding: it decodes to a tar with the files.
			if c != Raw && c != "" && bytes.HasPrefix(raw, []byte("./")) {
				t.Fatalf("%s stream looks like a plain tar", c)
			}
			if err := s.podVolume("step-b", dst).StreamIn(ctx, ".", c, 0, bytes.NewReader(raw)); err != nil {
				t.Fatal(err)
			}
			sameTree(t, files, readTree(t, dst))
		})
	}
}

func TestStreamOutOneFileAndBadInput(t *testing.T) {
	lp := newLocalPods(t, "w1")
	lp.startPod("step-a")
	s, _ := testStore(t, lp)
	ctx := testCtx(t)
	src := t.TempDir()
	writeTree(t, src, sampleTree())
	v := s.podVolume("step-a", src)
	rc, err := v.StreamOut(ctx, "dir/b.go", Zstd)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decoder(rc, Zstd)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(dec)
	h, err := tr.Next()
	if err != nil || h.Name != "b.go" {
		t.Fatalf("first entry %v, %v; want b.go", h, err)
	}
	_ = rc.Close()
	if _, err := v.StreamOut(ctx, ".", "lz4"); !errors.Is(err, ErrCompression) {
		t.Fatalf("lz4: %v, want ErrCompression", err)
	}
	if err := v.StreamIn(ctx, ".", "br", 0, strings.NewReader("")); !errors.Is(err, ErrCompression) {
		t.Fatalf("br: %v, want ErrCompression", err)
	}
	for _, p := range []string{"../x", "/etc", "a/../../b"} {
		if _, err := v.StreamOut(ctx, p, Raw); err == nil {
			t.Fatalf("path %q accepted", p)
		}
	}
	// Negative, not a number, or past what an int64 of bytes holds: an error, never no limit.
	for _, limit := range []float64{-1, math.NaN(), math.Inf(1), 1e13} {
		if err := v.StreamIn(ctx, ".", Raw, limit, strings.NewReader("")); err == nil {
			t.Fatalf("limit %v was accepted", limit)
		}
	}
}

// TestStreamInLimit: over the limit is a StreamLimitError and leaves the directory as it was,
// counting the decompressed tar (a stream of zeros compresses to almost nothing); 0 is no limit.
func TestStreamInLimit(t *testing.T) {
	big := map[string][]byte{"zeros": make([]byte, 3<<20), "small": []byte("x")}
	_, s, src := twoPods(t, big)
	ctx := testCtx(t)
	for _, c := range []Compression{Raw, Gzip, Zstd, S2} {
		stream := func() io.Reader {
			return bytes.NewReader(streamOut(ctx, t, s.podVolume("step-a", src), ".", c))
		}
		dst := t.TempDir()
		writeTree(t, dst, map[string][]byte{"keep": []byte("old")})
		err := s.podVolume("step-b", dst).StreamIn(ctx, ".", c, 1, stream())
		var lim *StreamLimitError
		if !errors.As(err, &lim) || lim.Limit != 1<<20 {
			t.Fatalf("%s: 3 MiB into a 1 MB limit: %v, want a StreamLimitError", c, err)
		}
		// The shim drops its staging directory once it has seen the upload cut, a moment after the
		// client gave up on it.
		var entries []os.DirEntry
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			entries, _ = os.ReadDir(dst)
			if len(entries) == 1 || time.Now().After(deadline) {
				break
			}
		}
		if len(entries) != 1 || entries[0].Name() != "keep" {
			t.Fatalf("%s: after the refused stream the directory holds %v", c, entries)
		}
		for _, limit := range []float64{0, 4, 1e-9} {
			d := t.TempDir()
			if err := s.podVolume("step-b", d).StreamIn(ctx, ".", c, limit, stream()); err != nil {
				t.Fatalf("%s limit %v: %v", c, limit, err)
			}
			sameTree(t, big, readTree(t, d))
		}
	}
}
