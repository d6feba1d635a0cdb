# common.sh: shared by images/build-* — where image archives go and how they reach containerd.
# Sourced, not run. Images are imported into containerd's k8s.io namespace, the one the CRI
# plugin (and so the kubelet) sees.

images_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Archives are build outputs: keep them outside the repo.
image_out=${STEPSHIM_IMAGE_OUT:-/var/cache/stepshim/images}
# The socket of the containerd that tests/cluster/up runs.
containerd_sock=${STEPSHIM_CONTAINERD_SOCK:-/run/stepshim-cluster/containerd/containerd.sock}

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# pack ROOTFS NAME [oci-pack options...]: writes $image_out/<name>.tar and echoes its path.
pack() {
    local rootfs=$1 name=$2; shift 2
    local out="$image_out/$(echo "$name" | tr '/:' '__').tar"
    mkdir -p "$image_out"
    python3 "$images_dir/oci-pack" "$rootfs" "$name" "$out" "$@" >&2 || die "packing $name failed"
    echo "$out"
}

# import TAR NAME: loads the archive into containerd (k8s.io namespace) and checks the tag exists.
import_image() {
    local tar=$1 name=$2
    [[ -S $containerd_sock ]] || die "containerd socket $containerd_sock not found (is tests/cluster/up running?)"
    ctr -a "$containerd_sock" -n k8s.io images import "$tar" >/dev/null \
        || die "ctr images import $tar failed"
    ctr -a "$containerd_sock" -n k8s.io images ls -q | grep -qxF "$name" \
        || die "image $name missing from containerd after import of $tar"
    echo "$(basename "$0"): imported $name" >&2
}
