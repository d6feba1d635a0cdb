// ContainerSpec, ATC's description of a container, and its mapping onto a step pod (k8s.StepSpec):
// the image (an artifact of this worker, a plain image reference, or a base resource type's image),
// the environment, CPU shares as a request without a limit, memory as request and limit, the
// network (Hermetic), the worker's certificates, and the step user, whose uid and gid are resolved
// (a number as is, a name through the image's /etc/passwd and /etc/group) to own the outputs.

package atcruntime

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// ContainerSpec describes a container as ATC's runtime.ContainerSpec does.
type ContainerSpec struct {
	TeamID   int
	TeamName string
	// JobID and StepName key the task caches (0 for one-off builds, which find none).
	JobID    int
	StepName string
	// Build names the build the container is for (ATC's build ID as a string; empty: none): the
	// pods' build label, and, unless Config.IgnoreLocality, the containers of one build prefer the
	// node where its other containers run.
	Build string

	ImageSpec ImageSpec
	// Env are NAME=VALUE entries of the pod's environment, inherited by every process.
	Env []string
	// Type is the step type ("task", "get", ...), for information.
	Type string
	// Dir is the default working directory of processes, absolute; relative paths of Inputs, Caches
	// and Outputs are taken relative to it.
	Dir     string
	Inputs  []Input
	Caches  []string
	Outputs map[string]string
	Limits  ContainerLimits
	// CertsBindMount mounts Config.CertsConfigMap at k8s.CertsDir, /etc/ssl/certs (nothing when
	// that is empty).
	CertsBindMount bool
	// Hermetic cuts the pod off the network (k8s.StepSpec.Hermetic).
	Hermetic bool
	// User runs processes and owns the outputs and caches; empty means the image's user.
	User string
}

// ImageSpec says where the container's image comes from: exactly one of ImageArtifact, ImageURL and
// ResourceType.
type ImageSpec struct {
	// ImageArtifact is a volume holding the image (an OCI layout, or rootfs/ and metadata.json).
	ImageArtifact Artifact
	// ImageURL is an image reference ("busybox:1.36", or Concourse's "docker:///busybox#1.36").
	ImageURL string
	// ResourceType is a base resource type, whose image Config.ResourceTypes names.
	ResourceType string
	Privileged   bool
}

// Input is an artifact put at DestinationPath (absolute, or relative to ContainerSpec.Dir).
type Input struct {
	Artifact        Artifact
	DestinationPath string
}

// ContainerLimits are ATC's limits. CPU is in shares, a relative weight (1024 = 1 CPU), mapped to a
// CPU request without a limit; Memory is in bytes, mapped to request = limit. Nil or zero is
// Garden's default: the pod keeps Config.Template's CPU and memory.
type ContainerLimits struct {
	CPU    *uint64
	Memory *uint64
}

// sharesPerCPU is what ATC (and the kernel's cpu.shares) count for one CPU.
const sharesPerCPU = 1024

// cpuRequest is ATC's CPU shares as a Kubernetes CPU request in millicores (at least 1m).
func cpuRequest(shares uint64) string {
	m := max(shares*1000/sharesPerCPU, 1)
	return strconv.FormatUint(m, 10) + "m"
}

// stepSpec is the pod of a container: cfg.Template with the spec's settings. image is the resolved
// image: a reference, or a directory of a pod of the worker.
func stepSpec(cfg *Config, handle string, spec ContainerSpec, image string, from *k8s.ImageFrom) (k8s.StepSpec, error) {
	s := cfg.Template
	s.Name, s.Image, s.ImageFrom = handle, image, from
	s.Step = spec.StepName
	if spec.Build != "" {
		s.Build = spec.Build
		if !cfg.IgnoreLocality && s.BuildAffinity == 0 {
			s.BuildAffinity = buildAffinity
		}
	}
	s.Privileged = spec.ImageSpec.Privileged
	s.Env = append([]k8s.EnvVar(nil), cfg.Template.Env...)
	for _, kv := range spec.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return k8s.StepSpec{}, fmt.Errorf("atcruntime: container %s: env entry %q is not NAME=VALUE", handle, kv)
		}
		s.Env = append(s.Env, k8s.EnvVar{Name: name, Value: value})
	}
	// Zero is Garden's default (no limit of its own), as no limit is: the template's settings stay.
	if spec.Limits.CPU != nil && *spec.Limits.CPU > 0 {
		s.CPU, s.CPURequest = "", cpuRequest(*spec.Limits.CPU)
	}
	if spec.Limits.Memory != nil && *spec.Limits.Memory > 0 {
		s.Memory = strconv.FormatUint(*spec.Limits.Memory, 10)
	}
	if spec.User != "" && s.RunAsUser == nil && s.RunAsGroup == nil {
		// The shim runs processes as the user they name only as root: as root, a task's run.user is
		// honoured whatever the image's USER (root in a non-root image, a user in a root one).
		root := int64(0)
		s.RunAsUser, s.RunAsGroup = &root, &root
	}
	s.Hermetic = spec.Hermetic
	if spec.CertsBindMount {
		s.CertsConfigMap = cfg.CertsConfigMap
	}
	return s, nil
}

// imageRef is the image reference of spec's ImageURL or ResourceType; empty for an ImageArtifact.
func imageRef(cfg *Config, spec ImageSpec) (string, error) {
	n := 0
	for _, set := range []bool{spec.ImageArtifact != nil, spec.ImageURL != "", spec.ResourceType != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return "", fmt.Errorf("atcruntime: image spec needs exactly one of ImageArtifact, ImageURL and ResourceType, has %d", n)
	}
	switch {
	case spec.ResourceType != "":
		ref := cfg.ResourceTypes[spec.ResourceType]
		if ref == "" {
			return "", fmt.Errorf("atcruntime: no image for base resource type %q (Config.ResourceTypes)", spec.ResourceType)
		}
		return ref, nil
	case spec.ImageURL != "":
		return parseImageURL(spec.ImageURL)
	}
	return "", nil
}

// parseImageURL reads a plain image reference, or Concourse's docker:///REPO[#TAG]; other schemes
// (raw:// names a directory on a Garden worker's host) have no meaning for a pod.
func parseImageURL(u string) (string, error) {
	rest, ok := strings.CutPrefix(u, "docker://")
	if !ok {
		if strings.HasPrefix(u, "raw://") {
			return "", fmt.Errorf("atcruntime: image URL %q: raw:// is a rootfs directory on a Garden "+
				"worker's host, which a pod cannot run; give base resource types images in "+
				"Config.ResourceTypes, which this worker registers instead of raw paths", u)
		}
		if strings.Contains(u, "://") {
			return "", fmt.Errorf("atcruntime: image URL %q: only docker:///REPO[#TAG] or a plain image reference", u)
		}
		return u, nil
	}
	rest = strings.TrimPrefix(rest, "/")
	repo, tag, hasTag := strings.Cut(rest, "#")
	if repo == "" {
		return "", fmt.Errorf("atcruntime: image URL %q names no repository", u)
	}
	if hasTag && tag != "" {
		return repo + ":" + tag, nil
	}
	return repo, nil
}

// containerPath is p made absolute against dir.
func containerPath(dir, p string) (string, error) {
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	if !path.IsAbs(dir) {
		return "", fmt.Errorf("atcruntime: relative path %q without an absolute ContainerSpec.Dir", p)
	}
	return path.Join(dir, p), nil
}

// resolveOwner is the uid and gid of user as the shim resolves a spawn's user (PROTOCOL.md 4.2):
// numbers as they are (a uid alone takes the gid of its passwd entry, else the same number), names
// through the image's /etc/passwd and /etc/group, read from the pod. Empty user is nil: the shim's.
func resolveOwner(ctx context.Context, c *shim.Client, user string) (*shim.Owner, error) {
	if user == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(user, ":")
	var passwd []string
	uid, uerr := strconv.ParseUint(name, 10, 32)
	var gid uint64
	if uerr != nil || !hasGroup {
		var err error
		if passwd, err = readEtc(ctx, c, "/etc/passwd", uerr != nil); err != nil {
			return nil, err
		}
		found := false
		uid, gid, found = lookupPasswd(passwd, name, uerr == nil, uid)
		if !found && uerr != nil {
			return nil, &UnknownUserError{User: user, Why: fmt.Sprintf("%q is not in the image's /etc/passwd", name)}
		}
		if !found {
			gid = uid
		}
	}
	if hasGroup {
		g, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			groups, err := readEtc(ctx, c, "/etc/group", true)
			if err != nil {
				return nil, err
			}
			var ok bool
			if g, ok = lookupGroup(groups, group); !ok {
				return nil, &UnknownUserError{User: user, Why: fmt.Sprintf("group %q is not in the image's /etc/group", group)}
			}
		}
		gid = g
	}
	return &shim.Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}

// UnknownUserError is a user (or group) name the image's /etc/passwd or /etc/group does not have,
// or that an image without those files cannot resolve. As Garden, the container is made anyway with
// the volumes' owners left as they are; a process run as that user then fails to start.
type UnknownUserError struct {
	User, Why string
}

func (e *UnknownUserError) Error() string {
	return fmt.Sprintf("atcruntime: user %q: %s", e.User, e.Why)
}

// readEtc reads the lines of file (a regular file of the image) from the pod; a missing file is no
// lines unless required, else an *UnknownUserError (an image FROM scratch has no users).
func readEtc(ctx context.Context, c *shim.Client, file string, required bool) ([]string, error) {
	var buf bytes.Buffer
	err := c.GetFiles(ctx, file, &buf)
	if shim.IsNotFound(err) && !required {
		return nil, nil
	}
	if shim.IsNotFound(err) {
		return nil, &UnknownUserError{Why: "the image has no " + file}
	}
	if err != nil {
		return nil, fmt.Errorf("atcruntime: reading %s of the image: %w", file, err)
	}
	tr := tar.NewReader(&buf)
	h, err := tr.Next()
	if err != nil || h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("atcruntime: %s of the image is not a regular file", file)
	}
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(tr, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// lookupPasswd finds a passwd entry by name, or by uid when byUID, and returns its uid and gid.
func lookupPasswd(lines []string, name string, byUID bool, uid uint64) (uint64, uint64, bool) {
	for _, l := range lines {
		f := strings.Split(l, ":")
		if len(f) < 4 {
			continue
		}
		u, err1 := strconv.ParseUint(f[2], 10, 32)
		g, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if byUID && u == uid || !byUID && f[0] == name {
			return u, g, true
		}
	}
	return uid, 0, false
}

// lookupGroup finds a group entry by name and returns its gid.
func lookupGroup(lines []string, name string) (uint64, bool) {
	for _, l := range lines {
		f := strings.Split(l, ":")
		if len(f) >= 3 && f[0] == name {
			if g, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				return g, true
			}
		}
	}
	return 0, false
}
