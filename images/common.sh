# common.sh: shared by images/build-*: crane (go-containerregistry's CLI, installed into the cache on
# first use), how a root filesystem becomes an image, and how image archives reach containerd.
# Sourced, not run; it makes the script's scratch directory ($work) and removes it on exit.
#
# An image is one reproducible layer (sorted entries, mtime 0, owner root) appended to an empty OCI
# base, then given its platform, entrypoint or cmd and PATH. crane changes an image's config only in
# a registry (`crane mutate`), so the build happens in crane's own in-memory registry on a free
# loopback port that lives as long as the script; the result is then saved as an archive for
# `ctr images import` or pushed to a real registry.

images_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$images_dir/.." && pwd)
die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# Build outputs and tools live outside the repo: /var/cache/stepshim when writable (the test
# cluster's cache), else the user's cache directory.
if [[ -n ${STEPSHIM_CACHE:-} ]]; then
    cache_dir=$STEPSHIM_CACHE
elif mkdir -p /var/cache/stepshim 2>/dev/null && [[ -w /var/cache/stepshim ]]; then
    cache_dir=/var/cache/stepshim
else
    cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/stepshim
fi
image_out=${STEPSHIM_IMAGE_OUT:-$cache_dir/images}
# The socket of the containerd that tests/cluster/up runs.
containerd_sock=${STEPSHIM_CONTAINERD_SOCK:-/run/stepshim-cluster/containerd/containerd.sock}
# Its ctr, built with it by tests/cluster/build-containerd into the cache; else ctr from PATH.
containerd_version=$(awk '{ for (i = 1; i < NF; i++) if ($i == "github.com/containerd/containerd/v2") { print $(i + 1); exit } }' \
    "$repo_root/tests/cluster/containerd-build/go.mod" 2>/dev/null || true)
ctr=${STEPSHIM_CACHE:-/var/cache/stepshim}/containerd-$containerd_version/bin/ctr
[[ -x $ctr ]] || ctr=ctr
# Not the warning, on every call, that containerd 2.2+ deprecates cgroup v1 (these machines mount v1).
export CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1
crane_version=v0.22.1
crane=$cache_dir/crane-$crane_version/crane

work=$(mktemp -d)
build_registry_pid=
images_cleanup() {
    if [[ -n $build_registry_pid ]]; then
        kill "$build_registry_pid" 2>/dev/null || true
        wait "$build_registry_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap images_cleanup EXIT

# need_crane: installs the pinned crane with `go install` (checksums from the Go checksum database)
# unless the cache has it.
need_crane() {
    [[ -x $crane ]] && return 0
    local go
    go=$(PATH=$PATH:/usr/local/go/bin command -v go) \
        || die "crane $crane_version is not in $(dirname "$crane") and installing it needs Go (https://go.dev/dl/)"
    echo "$(basename "$0"): installing crane $crane_version into $(dirname "$crane")" >&2
    mkdir -p "$(dirname "$crane")"
    GOBIN=$(dirname "$crane") GOFLAGS=-trimpath CGO_ENABLED=0 \
        "$go" install "github.com/google/go-containerregistry/cmd/crane@$crane_version" >&2 \
        || die "go install of crane $crane_version failed"
}

# start_build_registry: starts crane's in-memory registry on a free loopback port and sets
# $build_registry to its host:port. Call it from the script itself, not in a $(...) subshell: the
# registry must outlive each build and stop with the script.
build_registry=
start_build_registry() {
    need_crane
    : > "$work/registry.log"   # before the background job opens it, so the loop below can read it
    "$crane" registry serve --address 127.0.0.1:0 > /dev/null 2> "$work/registry.log" &
    build_registry_pid=$!
    local port deadline=$((SECONDS + 20))
    until port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/registry.log") && [[ -n $port ]]; do
        kill -0 "$build_registry_pid" 2>/dev/null || die "crane registry serve failed: $(cat "$work/registry.log")"
        (( SECONDS < deadline )) || die "crane registry serve did not start within 20s"
        sleep 0.1
    done
    build_registry=127.0.0.1:$port
}

# build ROOTFS NAME [crane mutate options...]: builds ROOTFS as an image in the build registry and
# echoes its reference there. NAME (a repository, no tag) only names it there.
build() {
    local rootfs=$1 name=$2; shift 2
    local layer=$work/$name.layer.tar ref
    [[ -n $build_registry ]] || die "start_build_registry was not called"
    mkdir -p "$(dirname "$layer")"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$layer" . \
        || die "packing the layer of $name failed"
    "$crane" append --oci-empty-base -f "$layer" -t "$build_registry/$name:layer" >/dev/null 2>"$work/crane.log" \
        || die "crane append for $name failed: $(tail -3 "$work/crane.log")"
    ref=$("$crane" mutate "$build_registry/$name:layer" -t "$build_registry/$name:built" \
        --set-platform linux/amd64 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        "$@" 2>"$work/crane.log") || die "crane mutate for $name failed: $(tail -3 "$work/crane.log")"
    echo "$ref"
}

# save REF NAME: writes the image REF as an archive tagged NAME to $image_out and echoes its path.
save() {
    local ref=$1 name=$2 out
    out="$image_out/$(echo "$name" | tr '/:' '__').tar"
    mkdir -p "$image_out"
    # A `crane mutate` that changes nothing, for its -o: an archive whose image is named NAME.
    "$crane" mutate "$ref" -t "$name" -o "$out.tmp" 2>"$work/crane.log" \
        || die "saving $name failed: $(tail -3 "$work/crane.log")"
    mv "$out.tmp" "$out"
    echo "$out"
}

# import TAR NAME: loads the archive into containerd (k8s.io namespace, the one the CRI plugin and
# so the kubelet sees), pins it and checks the tag exists. Pinned (the CRI's label, containerd 1.7
# and later): the kubelet never removes it, not even when the disk fills and its eviction manager
# deletes unused images to reclaim space, which took the step image away in the middle of a CI run
# on a shared disk. An imported name cannot be pulled again.
# The test cluster's further nodes (tests/cluster/nodes.sh) have containerds of their own, at
# n<i>/containerd/containerd.sock beside the first node's containerd directory: an image imported
# into the first node's goes into theirs too.
import_image() {
    local tar=$1 name=$2 sock socks=("$containerd_sock")
    [[ -S $containerd_sock ]] || die "containerd socket $containerd_sock not found (is tests/cluster/up running?)"
    for sock in "$(dirname "$(dirname "$containerd_sock")")"/n[0-9]*/containerd/containerd.sock; do
        [[ -S $sock && $sock != "$containerd_sock" ]] && socks+=("$sock")
    done
    for sock in "${socks[@]}"; do
        "$ctr" -a "$sock" -n k8s.io images import "$tar" >/dev/null \
            || die "ctr images import $tar into $sock failed"
        "$ctr" -a "$sock" -n k8s.io images label "$name" io.cri-containerd.pinned=pinned >/dev/null \
            || die "ctr images label $name (pinning it) in $sock failed"
        "$ctr" -a "$sock" -n k8s.io images ls -q | grep -qxF "$name" \
            || die "image $name missing from $sock after import of $tar"
    done
    echo "$(basename "$0"): imported $name${socks[1]:+ on ${#socks[@]} nodes}" >&2
}
