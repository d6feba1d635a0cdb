# lib.sh: what every tests/cluster script shares — where the cluster lives on disk, its network
# numbers, and the helpers that start a daemon with a pid file, stop it by pid, and poll with a
# deadline. Sourced, not run.

cluster_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$cluster_dir/../.." && pwd)

# State survives until `down`; runtime files (sockets, containerd state) live under /run.
STATE=${STEPSHIM_CLUSTER_STATE:-/var/lib/stepshim-cluster}
RUNDIR=${STEPSHIM_CLUSTER_RUN:-/run/stepshim-cluster}
PKI=$STATE/pki
PIDS=$STATE/pids
LOGS=$STATE/logs
export KUBECONFIG=$STATE/admin.kubeconfig

# Network: one bridge, one /24 for pods, the host at .1 on the bridge. The node IP is the bridge
# address so the apiserver reaches the kubelet over a network this cluster owns, not eth0.
BRIDGE=cni0
POD_CIDR=10.244.0.0/24
BRIDGE_IP=10.244.0.1
# The pod network of every node (`up --nodes N`: node k has 10.244.(k-1).0/24, nodes.sh): what the
# forwarder must reach (--pod-cidr), one node or many.
CLUSTER_POD_CIDR=10.244.0.0/16
NODE_IP=$BRIDGE_IP
# Only ever allocated, never routed: there is no kube-proxy.
SERVICE_CIDR=10.245.0.0/24
SERVICE_IP=10.245.0.1
APISERVER=https://127.0.0.1:6443
ETCD=http://127.0.0.1:2379
CONTAINERD_SOCK=$RUNDIR/containerd/containerd.sock
export STEPSHIM_CONTAINERD_SOCK=$CONTAINERD_SOCK
NODE_NAME=$(hostname | tr 'A-Z_' 'a-z-')

# Daemons `up` starts, in start order; `up` checks all are alive before calling a cluster healthy.
# The NetworkPolicy daemon (netpol.sh) is not among them: `up` starts it last, and again on a
# healthy cluster where it is not running, without restarting the others.
DAEMONS=(containerd registry etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

# take_lock: serializes up, down and restart-apiserver (fd 9; daemons never inherit it).
# A script called by one that holds the lock (up runs down) sees STEPSHIM_CLUSTER_LOCKED.
take_lock() {
    [[ -n ${STEPSHIM_CLUSTER_LOCKED:-} ]] && return 0
    exec 9> /run/stepshim-cluster.lock
    flock -w 900 9 || die "another tests/cluster script held /run/stepshim-cluster.lock for 900s"
    export STEPSHIM_CLUSTER_LOCKED=1
}

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
log() { echo "$(basename "$0"): $*" >&2; }

need_root() { [[ $(id -u) == 0 ]] || die "must run as root"; }

# The cached Kubernetes binaries for the pinned release (set by `up` once build-k8s is done).
k8s_bin() {
    local v
    v=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$cluster_dir/k8s-build/go.mod")
    echo "${STEPSHIM_CACHE:-/var/cache/stepshim}/k8s-$v/bin"
}

kubectl() { "$(k8s_bin)/kubectl" "$@"; }

# The cached containerd binaries (containerd, containerd-shim-runc-v2, ctr) of the pinned release
# (built by build-containerd).
containerd_bin() {
    local v
    v=$(awk '{ for (i = 1; i < NF; i++) if ($i == "github.com/containerd/containerd/v2") { print $(i + 1); exit } }' \
        "$cluster_dir/containerd-build/go.mod")
    echo "${STEPSHIM_CACHE:-/var/cache/stepshim}/containerd-$v/bin"
}

ctr() { "$(containerd_bin)/ctr" "$@"; }
# ctr would otherwise warn on every call that containerd 2.2+ deprecates cgroup v1 (these machines
# mount v1; containerd itself logs it once at start).
export CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1

# wait_for SECONDS WHAT CMD...: polls CMD every half second until it succeeds; dies naming WHAT
# (and the log to read, if LOG_HINT is set) when SECONDS pass first.
wait_for() {
    local secs=$1 what=$2; shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if (( SECONDS >= deadline )); then
            die "timed out after ${secs}s waiting for $what${LOG_HINT:+ (see $LOG_HINT)}"
        fi
        sleep 0.5
    done
}

pid_of() { [[ -f $PIDS/$1.pid ]] && cat "$PIDS/$1.pid"; }

# alive NAME: the daemon's recorded pid exists and is still the program we started.
alive() {
    local pid
    pid=$(pid_of "$1") || return 1
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    [[ $(tr '\0' '\n' < "/proc/$pid/cmdline" | head -1) == "$(head -1 "$PIDS/$1.cmd" 2>/dev/null)" ]]
}

# start_daemon NAME ARGV...: records ARGV (one argument a line, for restarts), starts it in its
# own session so the caller's timeout or Ctrl-C does not take it down, writes NAME.pid. With
# DAEMON_NETNS set, it runs in that network namespace (/run/netns/$DAEMON_NETNS, recorded too).
start_daemon() {
    local name=$1 ns=${DAEMON_NETNS:-}; shift
    mkdir -p "$PIDS" "$LOGS"
    printf '%s\n' "$@" > "$PIDS/$name.cmd"
    if [[ -n $ns ]]; then echo "$ns" > "$PIDS/$name.netns"; else rm -f "$PIDS/$name.netns"; fi
    # Every descriptor above stderr is closed first: the daemon must not inherit (and so hold
    # forever) the up/down lock on fd 9 or any lock a caller holds around a restart (`flock FILE
    # CMD` passes its descriptor on to CMD and everything CMD starts).
    setsid bash -c 'ns=$1; shift
        for fd in /proc/self/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec $fd>&-"; done
        [[ -n $ns ]] && exec nsenter --net="/run/netns/$ns" -- "$@"
        exec "$@"' \
        start_daemon "$ns" "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$PIDS/$name.pid"
}

# restart_daemon NAME: starts NAME again with exactly the arguments (and network namespace)
# recorded by start_daemon.
restart_daemon() {
    local name=$1 args ns=
    [[ -f $PIDS/$name.cmd ]] || die "no recorded command for $name in $PIDS"
    mapfile -t args < "$PIDS/$name.cmd"
    [[ -f $PIDS/$name.netns ]] && ns=$(cat "$PIDS/$name.netns")
    DAEMON_NETNS=$ns start_daemon "$name" "${args[@]}"
}

# stop_daemons GRACE NAME...: SIGTERM to each by recorded pid at once, SIGKILL to any still
# running after GRACE seconds, and wait until all have exited.
stop_daemons() {
    local grace=$1 name pid pids=(); shift
    for name in "$@"; do
        if alive "$name"; then
            pid=$(pid_of "$name")
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$name:$pid")
        fi
        rm -f "$PIDS/$name.pid"
    done
    local deadline=$((SECONDS + grace)) entry
    for entry in "${pids[@]}"; do
        name=${entry%%:*} pid=${entry#*:}
        while [[ -e /proc/$pid ]] && (( SECONDS < deadline )); do sleep 0.1; done
        if [[ -e /proc/$pid ]]; then
            log "$name (pid $pid) ignored SIGTERM for ${grace}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            while [[ -e /proc/$pid ]]; do sleep 0.1; done
        fi
    done
}

apiserver_ready() {
    curl -sf --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$APISERVER/readyz" | grep -qx ok
}

# node_ready [NAME]: the node (the first one by default) is Ready.
node_ready() {
    [[ $(kubectl get node "${1:-$NODE_NAME}" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# containerd_leftovers: what is left in the containerd of $CONTAINERD_SOCK: its sandboxes' network
# namespace paths into the array netns, every task killed, every container deleted.
containerd_leftovers() {
    local c ns deadline
    alive_sock "$CONTAINERD_SOCK" || return 0
    for c in $(ctr_ containers ls -q 2>/dev/null); do
        while read -r ns; do [[ -n $ns ]] && netns+=("$ns"); done < <(ctr_ containers info "$c" 2>/dev/null \
            | python3 -c 'import json,sys
for n in json.load(sys.stdin).get("Spec", {}).get("linux", {}).get("namespaces", []):
    if n.get("type") == "network" and n.get("path"): print(n["path"])' 2>/dev/null || true)
        ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    done
    for c in $(ctr_ containers ls -q 2>/dev/null); do
        deadline=$((SECONDS + 10))
        until ctr_ tasks delete "$c" >/dev/null 2>&1 || ! ctr_ tasks ls -q | grep -qx "$c"; do
            (( SECONDS < deadline )) || break
            sleep 0.2
        done
        ctr_ containers delete "$c" >/dev/null 2>&1 || true
    done
}

ctr_() { timeout 30 "$(containerd_bin)/ctr" -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }
alive_sock() { [[ -S $1 ]] && timeout 10 "$(containerd_bin)/ctr" -a "$1" version >/dev/null 2>&1; }

# kill_shims SOCK: containerd shims that outlived their containerd (they carry its socket path in
# their arguments).
kill_shims() {
    local p cmd
    for p in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
        if [[ $cmd == *containerd-shim* && $cmd == *"$1"* ]]; then
            log "killing leftover shim ${p#/proc/}"
            kill -KILL "${p#/proc/}" 2>/dev/null || true
        fi
    done
}

# unmount_under DIR...: every mount below the DIRs, deepest first.
unmount_under() {
    local dir m
    for dir in "$@"; do
        awk -v d="$dir/" 'index($2 "/", d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" || log "could not unmount $m"
        done
    done
}
