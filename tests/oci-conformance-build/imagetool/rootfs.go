package main

// The image made of Concourse's format: its config must carry metadata.json's settings and its
// one layer must be a tar of rootfs/ (checked against what writeRootfs wrote).

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
)

// rootfsImage checks the config and layer of the image served for writeRootfs's directory.
func (c *checker) rootfsImage(config descriptor, layers []descriptor) {
	v2 := "/v2/" + c.name
	if config.MediaType != mtConfig || len(layers) != 1 || layers[0].MediaType != mtLayer {
		c.fail("GET %s/manifests/latest: config %q and %d layers, want %s and one %s", v2,
			config.MediaType, len(layers), mtConfig, mtLayer)
		return
	}
	var cfg struct {
		OS, Architecture string
		Config           struct {
			Env, Cmd   []string
			User       string
			WorkingDir string
		}
	}
	body := c.do(http.MethodGet, v2+"/blobs/"+config.Digest, "user").body
	if err := json.Unmarshal(body, &cfg); err != nil {
		c.fail("GET %s/blobs/%s: config %s: %v", v2, config.Digest, body, err)
		return
	}
	arch := runtime.GOARCH // the names of OCI and Go agree for amd64, arm64, ppc64le, s390x, riscv64
	if cfg.OS != "linux" || cfg.Architecture != arch || !slices.Equal(cfg.Config.Env, []string{"PATH=/bin", "GREETING=hello"}) ||
		cfg.Config.User != "root" || !slices.Equal(cfg.Config.Cmd, []string{"/bin/sh"}) || cfg.Config.WorkingDir != "/" {
		c.fail("GET %s/blobs/%s: config %s does not carry metadata.json's env, user, cmd and working_dir, os linux and architecture %s",
			v2, config.Digest, body, arch)
	}
	layer := c.do(http.MethodGet, v2+"/blobs/"+layers[0].Digest, "user").body
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			c.fail("GET %s/blobs/%s: not a tar: %v", v2, layers[0].Digest, err)
			return
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
		if h.Typeflag == tar.TypeSymlink {
			files[h.Name] = []byte("-> " + h.Linkname)
		}
	}
	want := map[string][]byte{"etc/hello.txt": []byte("hello from the rootfs image\n"), "data/numbers.txt": numbers(),
		"bin/sh": []byte("-> /bin/true")}
	for name, content := range want {
		got, ok := files[name]
		if !ok {
			got, ok = files["./"+name]
		}
		if !ok || !bytes.Equal(got, content) {
			c.fail("GET %s/blobs/%s: the layer's %s is not rootfs/%s (%d entries)", v2, layers[0].Digest, name, name, len(files))
		}
	}
}
