package main

// Writing the two image directories the suite is pointed at: an OCI image layout and Concourse's
// rootfs/ + metadata.json format. Every byte is fixed (names, modes, times, contents), so the
// digests are the same on every run and every machine.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	mtManifest = "application/vnd.oci.image.manifest.v1+json"
	mtIndex    = "application/vnd.oci.image.index.v1+json"
	mtConfig   = "application/vnd.oci.image.config.v1+json"
	mtLayer    = "application/vnd.oci.image.layer.v1.tar"
	mtLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
	refName    = "org.opencontainers.image.ref.name"
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// entry is one member of a layer: a directory (body nil, not a link), a file or a symlink.
type entry struct {
	name, link string
	body       []byte
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tarOf packs entries with fixed owners, modes and times.
func tarOf(entries []entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(1700000000, 0)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatUSTAR}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		case e.body == nil:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(e.body))
		}
		must(tw.WriteHeader(h))
		if e.body != nil {
			_, err := tw.Write(e.body)
			must(err)
		}
	}
	must(tw.Close())
	return buf.Bytes()
}

// gzipOf compresses with no name and no time in the header, so the output is fixed.
func gzipOf(b []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	must(err)
	_, err = zw.Write(b)
	must(err)
	must(zw.Close())
	return buf.Bytes()
}

// numbers is a file of about 150 KiB, large enough to take several reads to stream.
func numbers() []byte {
	var sb strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&sb, "line %05d of the conformance image\n", i)
	}
	return []byte(sb.String())
}

// writeLayout writes an OCI image layout: one image (tags latest and 1.0) of an uncompressed layer
// and a gzip layer for one architecture, or, for several, an image per architecture sharing the
// layers (tags 1.0, 2.0, ...), listed with their platforms in index.json (latest: the index).
func writeLayout(dir string, archs ...string) {
	blobs := filepath.Join(dir, "blobs", "sha256")
	must(os.MkdirAll(blobs, 0o755))
	put := func(mediaType string, b []byte) descriptor {
		d := descriptor{MediaType: mediaType, Digest: digestOf(b), Size: int64(len(b))}
		must(os.WriteFile(filepath.Join(blobs, strings.TrimPrefix(d.Digest, "sha256:")), b, 0o644))
		return d
	}
	base := tarOf([]entry{
		{name: "bin/"},
		{name: "bin/sh", link: "/bin/true"},
		{name: "etc/"},
		{name: "etc/hello.txt", body: []byte("hello from the conformance image\n")},
	})
	data := tarOf([]entry{{name: "data/"}, {name: "data/numbers.txt", body: numbers()}})
	layers := []descriptor{put(mtLayer, base), put(mtLayerGz, gzipOf(data))}
	var manifests []any
	for i, arch := range archs {
		config := map[string]any{
			"architecture": arch,
			"os":           "linux",
			"config":       map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": []string{"/bin/sh"}, "WorkingDir": "/"},
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digestOf(base), digestOf(data)}},
		}
		manifest := map[string]any{
			"schemaVersion": 2,
			"mediaType":     mtManifest,
			"config":        put(mtConfig, jsonOf(config)),
			"layers":        layers,
		}
		m := put(mtManifest, jsonOf(manifest))
		m.Annotations = map[string]string{refName: fmt.Sprintf("%d.0", i+1)}
		if len(archs) == 1 {
			manifests = append(manifests, m)
		} else {
			manifests = append(manifests, struct {
				descriptor
				Platform map[string]string `json:"platform"`
			}{m, map[string]string{"os": "linux", "architecture": arch}})
		}
	}
	index := map[string]any{"schemaVersion": 2, "mediaType": mtIndex, "manifests": manifests}
	must(os.WriteFile(filepath.Join(dir, "index.json"), jsonOf(index), 0o644))
	must(os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
}

// writeRootfs writes Concourse's image format: rootfs/ and metadata.json.
func writeRootfs(dir string) {
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "data"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(root, "etc", "hello.txt"), []byte("hello from the rootfs image\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "data", "numbers.txt"), numbers(), 0o644))
	must(os.Symlink("/bin/true", filepath.Join(root, "bin", "sh")))
	meta := map[string]any{"env": []string{"PATH=/bin", "GREETING=hello"}, "user": "root",
		"cmd": []string{"/bin/sh"}, "working_dir": "/"}
	must(os.WriteFile(filepath.Join(dir, "metadata.json"), jsonOf(meta), 0o644))
}

func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	must(err)
	return b
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagetool:", err)
		os.Exit(1)
	}
}
