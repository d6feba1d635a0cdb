// Tests of files in and out (PROTOCOL.md 4.8) against the real shim: a tar round trip, chunked
// uploads, single entries, missing paths and hostile archives.

package shim_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestFilesRoundTrip(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	dir := filepath.Join(t.TempDir(), "in", "deep")
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	entries := []struct {
		hdr  tar.Header
		body string
	}{
		{tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: mtime}, ""},
		{tar.Header{Name: "d/a.txt", Typeflag: tar.TypeReg, Mode: 0o640, ModTime: mtime}, "alpha\n"},
		{tar.Header{Name: "d/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: mtime}, "#!/bin/sh\necho hi\n"},
		{tar.Header{Name: "d/link", Typeflag: tar.TypeSymlink, Linkname: "a.txt", Mode: 0o777, ModTime: mtime}, ""},
	}
	for _, e := range entries {
		e.hdr.Size = int64(len(e.body))
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(e.body))
	}
	_ = tw.Close()
	archive := in.Bytes()
	if err := s.Client.PutFiles(ctx, dir, &in); err != nil {
		t.Fatalf("put: %v", err)
	}
	// A reader of unknown length goes as a chunked body.
	chunked := filepath.Join(t.TempDir(), "chunked")
	if err := s.Client.PutFiles(ctx, chunked, io.MultiReader(bytes.NewReader(archive))); err != nil {
		t.Fatalf("chunked put: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(chunked, "d", "run.sh")); err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("chunked put wrote %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "d", "link")); err != nil || string(b) != "alpha\n" {
		t.Fatalf("extracted link reads %q, %v", b, err)
	}

	var out bytes.Buffer
	if err := s.Client.GetFiles(ctx, filepath.Join(dir, "d")+"/", &out); err != nil {
		t.Fatalf("get: %v", err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		desc := strconv.Itoa(int(h.Typeflag)) + " " + strconv.FormatInt(h.Mode&0o7777, 8) + " " + string(b) + h.Linkname
		if h.Typeflag != tar.TypeSymlink && !h.ModTime.Equal(mtime) {
			desc += " mtime " + h.ModTime.String()
		}
		got[strings.TrimSuffix(h.Name, "/")] = desc
	}
	want := map[string]string{
		"./a.txt":  "48 640 alpha\n",
		"./run.sh": "48 755 #!/bin/sh\necho hi\n",
		"./link":   "50 777 a.txt",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("entry %s = %q, want %q (all: %q)", name, got[name], w, got)
		}
	}

	// One entry named after the last component.
	out.Reset()
	if err := s.Client.GetFiles(ctx, filepath.Join(dir, "d", "a.txt"), &out); err != nil {
		t.Fatal(err)
	}
	if h, err := tar.NewReader(&out).Next(); err != nil || h.Name != "a.txt" {
		t.Fatalf("single file entry: %+v %v", h, err)
	}
	if err := s.Client.GetFiles(ctx, filepath.Join(dir, "missing"), io.Discard); !shim.IsNotFound(err) || !shim.HasCode(err, shim.CodeFileNotFound) {
		t.Fatalf("missing file: err = %v", err)
	}

	var evil bytes.Buffer
	tw = tar.NewWriter(&evil)
	_ = tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	if err := s.Client.PutFiles(ctx, dir, &evil); !shim.HasCode(err, shim.CodeInvalidTar) {
		t.Fatalf("hostile tar: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "escape")); !os.IsNotExist(err) {
		t.Fatalf("hostile entry written outside: %v", err)
	}
	if err := s.Client.PutFiles(ctx, "relative/dir", bytes.NewReader(nil)); !shim.HasCode(err, shim.CodeInvalidPath) {
		t.Fatalf("relative dir: err = %v", err)
	}
}
