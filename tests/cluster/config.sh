# config.sh: the loopback registry's address, and the configuration files of the registry,
# containerd, the CNI network and the kubelet.
# Every setting that departs from upstream defaults carries a comment saying why; the README
# gathers them. Sourced by `up` after lib.sh.

# The OCI registry `up` runs on the node's loopback (CNCF distribution, tests/cluster/build-registry):
# where images/build-shim-image --push sends the shim image and the kubelet pulls it from. containerd
# 2's CRI pulls over plain HTTP from a loopback host with a port and no hosts.toml (it tries HTTPS,
# skipping verification, and falls back to HTTP when the answer is not TLS), so the containerd
# config below does not mention it. Not 5000, which other local registries tend to take.
REGISTRY_PORT=${STEPSHIM_REGISTRY_PORT:-5873}
REGISTRY_ADDR=127.0.0.1:$REGISTRY_PORT

# registry_ready: the registry answers the distribution API's base endpoint (GET /v2/, 200).
registry_ready() { curl -sf --max-time 3 "http://$REGISTRY_ADDR/v2/" >/dev/null; }

write_registry_config() {
    mkdir -p "$STATE/registry/data"
    cat > "$STATE/registry/config.yml" <<EOF
# The OCI registry of the stepshim test cluster (written by tests/cluster/up).
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem:
    rootdirectory: $STATE/registry/data
  # Tests may delete what they pushed; down removes the whole directory anyway.
  delete: {enabled: true}
http:
  # Loopback only: plain HTTP, no authentication; crane and containerd on this host reach it.
  addr: $REGISTRY_ADDR
EOF
}

write_containerd_config() {
    mkdir -p "$STATE/containerd/certs.d" "$RUNDIR/containerd"
    cat > "$STATE/containerd/config.toml" <<EOF
# containerd 2 for the stepshim test cluster (written by tests/cluster/up; built by
# tests/cluster/build-containerd). Config version 4, containerd 2.4's own: the CRI lives in the
# io.containerd.cri.v1.images and io.containerd.cri.v1.runtime plugins (the io.containerd.grpc.v1.cri
# plugin keeps only the streaming server, whose defaults serve: 127.0.0.1, a free port), and the
# sockets are the io.containerd.server.v1.* plugins. An older version would be migrated at every start.
version = 4
# Own root, state, sockets and shim socket directory, so this never mixes with another containerd
# on the machine; no drop-in files from /etc/containerd/conf.d either.
root = "$STATE/containerd/root"
state = "$RUNDIR/containerd/state"
imports = []

[plugins."io.containerd.server.v1.grpc"]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.server.v1.ttrpc"]
  # Version 4 no longer derives it from the gRPC address; the default is /run/containerd's.
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.shim.v1.manager"]
  # The shims' sockets (default /run/containerd/s); at most 42 characters.
  socket_dir = "$RUNDIR/containerd/s"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "$STATE/containerd/image-verifier"
[plugins."io.containerd.nri.v1.nri"]
  # Nothing here uses NRI, and its default socket (/var/run/nri/nri.sock) is per machine.
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Built by images/build-images and imported; there is no registry to pull k8s' pause from.
    sandbox = "stepshim.local/pause:1"
  [plugins."io.containerd.cri.v1.images".registry]
    # Per-registry hosts.toml files (certs.d layout: <host[:port]>/hosts.toml), none by default:
    # loopback registries such as $REGISTRY_ADDR need none (plain HTTP is tried after HTTPS fails).
    config_path = "$STATE/containerd/certs.d"

[plugins."io.containerd.transfer.v1.local"]
  # The same hosts.toml directory for pulls through the transfer service (ctr).
  config_path = "$STATE/containerd/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # These machines withhold CAP_SYS_RESOURCE, so no process may lower its oom_score_adj below 0;
  # the CRI's -998 for sandboxes (and the kubelet's -997 for Guaranteed pods) would make runc
  # fail with "can't get final child's PID from pipe". This clamps them to containerd's own (0).
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # Debian's runc (the shim itself sits beside the containerd binary).
        BinaryName = "/usr/sbin/runc"
        # No systemd runs on these machines: cgroupfs, matching the kubelet's cgroupDriver.
        SystemdCgroup = false
        # runc's state beside containerd's, so tests/cluster/down finds and removes it.
        Root = "$RUNDIR/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    # Debian's containernetworking-plugins install here, not /opt/cni/bin.
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
}

write_cni_config() {
    mkdir -p "$STATE/cni/net.d" "$STATE/cni/ipam"
    cat > "$STATE/cni/net.d/10-stepshim.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "stepshim",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0", "gw": "$BRIDGE_IP" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

write_kubelet_config() {
    mkdir -p "$STATE/kubelet"
    cat > "$STATE/kubelet/config.yaml" <<EOF
# kubelet for the stepshim test cluster (written by tests/cluster/up).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines mount cgroup v1 and run no systemd; Kubernetes 1.35 refuses cgroup v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# No CAP_SYS_RESOURCE here (see restrict_oom_score_adj in containerd's config): the default -999
# cannot be applied and only logs a failure.
oomScoreAdj: 0
# Serve on the bridge address (the node IP), not on every interface.
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
# No CoreDNS: pods resolve with the host's resolv.conf (ClusterFirst falls back to Default).
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# Load tests run 100+ step pods on this one node; the pod /24 holds 253 addresses.
maxPods: 250
# Build machines have big disks that are often mostly used, and shared: free space moves by tens of
# GiB with other work. Evict (and taint the node against new pods) only when truly full: an absolute
# floor, since even 1% of a 252 GiB disk (2.5 GiB) once tainted the node in the middle of a CI run.
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "512Mi"
  nodefs.inodesFree: "1%"
  imagefs.available: "512Mi"
  imagefs.inodesFree: "1%"
evictionPressureTransitionPeriod: 30s
# The same image content reaches the node both imported (stepshim.local/stepshim:dev) and pulled
# from the loopback registry (by digest). Once the kubelet has pulled an image ID it records the
# names it pulled it under, and by default (NeverVerifyPreloadedImages) pulls it again before a pod
# may use it under any other name, which for an imported stepshim.local name always fails. No pull
# here needs credentials, so there is nothing to verify.
imagePullCredentialsVerificationPolicy: NeverVerify
# Never garbage-collect images: ours are imported, not pullable, so a deleted one is gone.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}
