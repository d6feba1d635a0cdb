# nodes.sh: the test cluster's further nodes (`up --nodes N`), each a containerd and a kubelet of the
# same builds as the first node's, in a network namespace of its own. Sourced by `up` and `down`
# after lib.sh, config.sh and netpol.sh (and pki.sh for `up`).
#
# Node k (k = 2..N; index i = k - 1) is named $NODE_NAME-k and has:
# - the network namespace stepshim-n<i>, joined to the host by the veth pair ssn<i>h (host,
#   10.246.<i>.1/30) and ssn<i>n (node, 10.246.<i>.2/30); its default route is the host;
# - its own bridge cni0 at 10.244.<i>.1 (its node IP) for its pods, 10.244.<i>.0/24; the host
#   routes that /24 to the node, so pods of every node, the host and its tools reach each other
#   by their addresses, with no address translation (NetworkPolicy sees pod IPs);
# - the apiserver and the loopback registry, which listen on the host's 127.0.0.1, at the host's
#   end of its veth (10.246.<i>.1:6443 and :5873), translated to 127.0.0.1 on the host (DNAT with
#   route_localnet on that veth only): nothing listens on any other address of the host;
# - its own containerd (state under $STATE/nodes/<i> and $RUNDIR/n<i>), kubelet (cgroup root
#   /stepshim-n<i>, so its pods' cgroups never mix with another node's) and kube-network-policies,
#   all started in its network namespace only (same file system: the binaries, images archives and
#   the registry are shared);
# - host-local daemons of its own: what runs with hostNetwork (the forwarder) sees the node's
#   127.0.0.1, as on a real node.
# The host forwards between the nodes' veths and the first node's bridge and nothing else (its
# STEPSHIM-NODES chain drops forwarding to any other interface): ip_forward is on for that, and
# `down` puts it back.

NODES_CHAIN=STEPSHIM-NODES
NODE_LINK_NET=10.246

# node_vars I: the variables of node index I (1-based beyond the first node).
node_vars() {
    local i=$1
    N_NAME=$NODE_NAME-$((i + 1))
    N_NETNS=stepshim-n$i
    N_VETH_HOST=ssn${i}h
    N_VETH_NODE=ssn${i}n
    N_LINK_HOST=$NODE_LINK_NET.$i.1
    N_LINK_NODE=$NODE_LINK_NET.$i.2
    N_POD_CIDR=10.244.$i.0/24
    N_IP=10.244.$i.1
    N_STATE=$STATE/nodes/$i
    N_RUN=$RUNDIR/n$i
    N_SOCK=$N_RUN/containerd/containerd.sock
    N_CGROUP=stepshim-n$i
}

# nsx CMD...: CMD in node $N_NETNS's network namespace (and the host's everything else).
nsx() { nsenter --net="/run/netns/$N_NETNS" "$@"; }

# node_indexes: the indexes of the further nodes that have state, ascending.
node_indexes() {
    local d
    for d in "$STATE"/nodes/*/; do
        [[ -d $d ]] && basename "$d"
    done | sort -n
}

# node_alive I: node I's daemons run.
node_alive() {
    local d
    for d in containerd-n"$1" kubelet-n"$1"; do alive "$d" || return 1; done
}

# nodes_forwarding: the host forwards between the nodes and the first node's bridge only.
nodes_forwarding() {
    [[ -f $STATE/ip_forward.saved ]] || cat /proc/sys/net/ipv4/ip_forward > "$STATE/ip_forward.saved"
    iptables -w -N "$NODES_CHAIN" 2>/dev/null || iptables -w -F "$NODES_CHAIN"
    iptables -w -A "$NODES_CHAIN" -i ssn+ -o ssn+ -j ACCEPT
    iptables -w -A "$NODES_CHAIN" -i ssn+ -o "$BRIDGE" -j ACCEPT
    iptables -w -A "$NODES_CHAIN" -i "$BRIDGE" -o ssn+ -j ACCEPT
    iptables -w -A "$NODES_CHAIN" -i ssn+ -j DROP
    iptables -w -A "$NODES_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
    iptables -w -C FORWARD -j "$NODES_CHAIN" 2>/dev/null || iptables -w -I FORWARD -j "$NODES_CHAIN"
    echo 1 > /proc/sys/net/ipv4/ip_forward
}

# node_network I: the namespace, the veth pair, addresses, routes, the node's bridge, and the
# host's translation of the node's view of the apiserver and registry.
node_network() {
    node_vars "$1"
    ip netns add "$N_NETNS" 2>/dev/null || true
    if ! ip link show "$N_VETH_HOST" >/dev/null 2>&1; then
        ip link add "$N_VETH_HOST" type veth peer name "$N_VETH_NODE" netns "$N_NETNS" \
            || die "creating veth $N_VETH_HOST failed"
    fi
    ip addr replace "$N_LINK_HOST/30" dev "$N_VETH_HOST"
    ip link set "$N_VETH_HOST" up
    echo 1 > "/proc/sys/net/ipv4/conf/$N_VETH_HOST/route_localnet"
    ip route replace "$N_POD_CIDR" via "$N_LINK_NODE" dev "$N_VETH_HOST"
    nsx ip link set lo up
    nsx ip addr replace "$N_LINK_NODE/30" dev "$N_VETH_NODE"
    nsx ip link set "$N_VETH_NODE" up
    nsx ip route replace default via "$N_LINK_HOST"
    nsx ip link show "$BRIDGE" >/dev/null 2>&1 || nsx ip link add "$BRIDGE" type bridge
    nsx ip addr replace "$N_IP/24" dev "$BRIDGE"
    nsx ip link set "$BRIDGE" up
    nsx sysctl -qw net.ipv4.ip_forward=1
    local port
    for port in 6443 "$REGISTRY_PORT"; do
        local rule=(PREROUTING -i "$N_VETH_HOST" -d "$N_LINK_HOST" -p tcp --dport "$port" -j DNAT --to-destination "127.0.0.1:$port")
        iptables -w -t nat -C "${rule[@]}" 2>/dev/null || iptables -w -t nat -A "${rule[@]}"
    done
}

# node_files I: node I's certificates, kubeconfig and the configs of its containerd, CNI network
# and kubelet (config.sh's, with the node's paths and addresses).
node_files() {
    node_vars "$1"
    mkdir -p "$N_STATE/pki" "$N_RUN/containerd"
    cert "kubelet-n$1" "system:node:$N_NAME" system:nodes "IP:$N_IP,IP:127.0.0.1,DNS:$N_NAME" serverAuth,clientAuth
    cp "$PKI/kubelet-n$1.crt" "$N_STATE/pki/kubelet.crt"
    cp "$PKI/kubelet-n$1.key" "$N_STATE/pki/kubelet.key"
    cp "$PKI/ca.crt" "$N_STATE/pki/ca.crt"
    # The apiserver's certificate names localhost, not the veth's address the node dials.
    APISERVER=https://$N_LINK_HOST:6443 kubeconfig "$N_STATE/kubelet.kubeconfig" "kubelet-n$1"
    sed -i 's|^    server: .*|&\n    tls-server-name: localhost|' "$N_STATE/kubelet.kubeconfig"
    (
        STATE=$N_STATE RUNDIR=$N_RUN CONTAINERD_SOCK=$N_SOCK PKI=$N_STATE/pki
        POD_CIDR=$N_POD_CIDR BRIDGE_IP=$N_IP NODE_IP=$N_IP
        write_containerd_config
        write_cni_config
        write_kubelet_config
        echo "cgroupRoot: /$N_CGROUP" >> "$STATE/kubelet/config.yaml"
        # The loopback registry is the host's: reached at the host's end of the veth.
        mkdir -p "$STATE/containerd/certs.d/$REGISTRY_ADDR"
        cat > "$STATE/containerd/certs.d/$REGISTRY_ADDR/hosts.toml" <<EOF
# The node's 127.0.0.1 is its own; the registry listens on the host's (tests/cluster/nodes.sh).
server = "http://$REGISTRY_ADDR"
[host."http://$N_LINK_HOST:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
    )
}

# node_up I: node I's network, files and daemons, its images imported, until it is Ready and its
# NetworkPolicy daemon has its queue.
node_up() {
    local i=$1 bin=$2
    node_network "$i"
    node_files "$i"
    node_vars "$i"
    local c
    for c in /sys/fs/cgroup/*/; do
        [[ -d $c ]] && ! [[ -L ${c%/} ]] && mkdir -p "$c$N_CGROUP"
    done
    LOG_HINT=$LOGS/containerd-n$i.log
    DAEMON_NETNS=$N_NETNS start_daemon "containerd-n$i" \
        "$(containerd_bin)/containerd" --config "$N_STATE/containerd/config.toml"
    wait_for 60 "containerd of node $N_NAME" ctr -a "$N_SOCK" version
    STEPSHIM_CONTAINERD_SOCK=$N_SOCK "$repo_root/images/build-images" pause step
    LOG_HINT=$LOGS/kubelet-n$i.log
    DAEMON_NETNS=$N_NETNS start_daemon "kubelet-n$i" "$bin/kubelet" \
        --config="$N_STATE/kubelet/config.yaml" \
        --kubeconfig="$N_STATE/kubelet.kubeconfig" \
        --root-dir="$N_STATE/kubelet/root" \
        --hostname-override="$N_NAME" --node-ip="$N_IP"
    wait_for 120 "node $N_NAME Ready" node_ready "$N_NAME"
    unset LOG_HINT
    NETPOL_NETNS=$N_NETNS NETPOL_NAME=$N_NAME NETPOL_SUFFIX=-n$i POD_CIDR=$N_POD_CIDR \
        NETPOL_APISERVER=https://$N_LINK_HOST:6443 netpol_up
}

# node_down I: node I's pods' containers, daemons, leftover shims, mounts, cgroups, network.
node_down() {
    local i=$1
    node_vars "$i"
    if [[ -e /run/netns/$N_NETNS ]]; then
        NETPOL_NETNS=$N_NETNS NETPOL_NAME=$N_NAME NETPOL_SUFFIX=-n$i POD_CIDR=$N_POD_CIDR netpol_down
    fi
    stop_daemons 30 "kubelet-n$i"
    local netns=() ns
    CONTAINERD_SOCK=$N_SOCK containerd_leftovers
    stop_daemons 30 "containerd-n$i"
    kill_shims "$N_SOCK"
    for ns in "${netns[@]}"; do
        umount "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
    unmount_under "$N_STATE" "$N_RUN"
    local c
    for c in /sys/fs/cgroup/*/"$N_CGROUP"; do
        [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
        [[ -d $c ]] && log "could not remove cgroup $c"
    done
    local port
    for port in 6443 "$REGISTRY_PORT"; do
        while iptables -w -t nat -D PREROUTING -i "$N_VETH_HOST" -d "$N_LINK_HOST" -p tcp --dport "$port" \
            -j DNAT --to-destination "127.0.0.1:$port" 2>/dev/null; do :; done
    done
    local hook
    for hook in INPUT OUTPUT FORWARD; do
        while iptables -w -D "$hook" -j "STEPSHIM-CUT-$i" 2>/dev/null; do :; done
    done
    iptables -w -F "STEPSHIM-CUT-$i" 2>/dev/null && iptables -w -X "STEPSHIM-CUT-$i" 2>/dev/null || true
    ip route del "$N_POD_CIDR" 2>/dev/null || true
    ip link del "$N_VETH_HOST" 2>/dev/null || true
    ip netns del "$N_NETNS" 2>/dev/null || true
    rm -rf "$N_STATE" "$N_RUN"
}

# nodes_down: every further node, then the host's forwarding as it was.
nodes_down() {
    local i
    for i in $(node_indexes); do node_down "$i"; done
    while iptables -w -D FORWARD -j "$NODES_CHAIN" 2>/dev/null; do :; done
    iptables -w -F "$NODES_CHAIN" 2>/dev/null && iptables -w -X "$NODES_CHAIN" 2>/dev/null || true
    if [[ -f $STATE/ip_forward.saved ]]; then
        cat "$STATE/ip_forward.saved" > /proc/sys/net/ipv4/ip_forward
        rm -f "$STATE/ip_forward.saved"
    fi
    rmdir "$STATE/nodes" 2>/dev/null || true
}
