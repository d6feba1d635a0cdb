# netpol.sh: NetworkPolicy enforcement in the test cluster. kube-network-policies (build-netpol)
# runs as a host daemon that decides, from an nfqueue, the first packet of every new connection
# a pod makes or receives; the iptables rules here send those packets to its queue. Sourced by
# `up` and `down` after lib.sh (and pki.sh for `up`).
#
# Why these rules and not the controller's own: it queues with nftables' `queue` expression
# (nft_queue), which this machine class's kernel is built without (no CONFIG_NFT_QUEUE, no
# loadable modules); the xtables NFQUEUE target (through nft_compat) is built in. Its own
# nftables table therefore never loads (its log repeats "syncing nftables rules" errors).
#
# What goes to the queue (IPv4; pods have no IPv6 here), all but packets of established or
# related connections:
# - FORWARD, from or to a pod: pod to pod. The pods share the bridge cni0, so these frames are
#   bridged, and reach the IPv4 hooks only with br_netfilter's bridge-nf-call-iptables=1 (set
#   here, put back by `down`).
# - INPUT from cni0, from a pod: a pod to any of the node's own addresses (local delivery never
#   passes FORWARD or POSTROUTING, where the controller's own rules hook). Only from cni0: the
#   node's own traffic to its bridge address (the apiserver to the kubelet) comes in on lo.
# - OUTPUT to cni0, to a pod, from a process not running as root: like the controller's own
#   rules, the node's root traffic (kubelet, stepctl, the tests) is let through undecided.
# Nothing leaves the node otherwise: ip_forward stays 0.
# Fail-open (--queue-bypass), unlike the controller's default: this cluster is shared by tests
# that have no policies, and a stopped daemon must not cut their pods off. The tests that check
# enforcement (15-networkpolicy, 80-step-spec) fail instead, and `up` starts a daemon that died.
#
# A further node (nodes.sh) has a daemon and rules of its own, in its network namespace: the
# functions below act there when NETPOL_NETNS names it, with NETPOL_NAME its node, NETPOL_SUFFIX
# its daemon's name suffix and POD_CIDR its pods'. nfqueues, iptables and the bridge sysctl are
# per network namespace.

NETPOL_DAEMON=kube-network-policies
# in_netpol_ns CMD...: CMD in the network namespace the rules are for (the host's by default).
in_netpol_ns() {
    if [[ -n ${NETPOL_NETNS:-} ]]; then nsenter --net="/run/netns/$NETPOL_NETNS" -- "$@"; else "$@"; fi
}
netpol_daemon() { echo "$NETPOL_DAEMON${NETPOL_SUFFIX:-}"; }
NETPOL_QUEUE=${STEPSHIM_NETPOL_QUEUE:-100}
NETPOL_CHAIN=STEPSHIM-NETPOL
NETPOL_USER=system:kube-network-policies
BR_NF_SYSCTL=/proc/sys/net/bridge/bridge-nf-call-iptables

# The jumps into $NETPOL_CHAIN, one per line as iptables arguments after -A/-C/-D.
netpol_jumps() {
    echo "FORWARD -s $POD_CIDR -j $NETPOL_CHAIN"
    echo "FORWARD -d $POD_CIDR -j $NETPOL_CHAIN"
    echo "INPUT -i $BRIDGE -s $POD_CIDR -j $NETPOL_CHAIN"
    echo "OUTPUT -o $BRIDGE -d $POD_CIDR -m owner ! --uid-owner 0 -j $NETPOL_CHAIN"
}

netpol_queue_bound() {
    in_netpol_ns awk -v q="$NETPOL_QUEUE" '$1 == q { found = 1 } END { exit !found }' \
        /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

# netpol_access: the daemon's client certificate, kubeconfig and RBAC (what its informers watch,
# and the events it records). Leaves existing files alone.
netpol_access() {
    cert kube-network-policies "$NETPOL_USER" "" "" clientAuth
    [[ -f $STATE/kube-network-policies.kubeconfig ]] \
        || kubeconfig "$STATE/kube-network-policies.kubeconfig" kube-network-policies
    kubectl apply -f - >/dev/null <<EOF || die "applying the RBAC of $NETPOL_DAEMON failed"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: stepshim-kube-network-policies}
rules:
- {apiGroups: [""], resources: [pods, namespaces], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
- {apiGroups: ["", events.k8s.io], resources: [events], verbs: [create, patch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: stepshim-kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: stepshim-kube-network-policies}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: $NETPOL_USER}
EOF
}

# netpol_rules: the chain, written afresh, and its jumps, each added only if missing (so a second
# `up` adds none).
netpol_rules() {
    local jump
    in_netpol_ns iptables -w -F "$NETPOL_CHAIN" 2>/dev/null || in_netpol_ns iptables -w -N "$NETPOL_CHAIN"
    in_netpol_ns iptables -w -A "$NETPOL_CHAIN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    in_netpol_ns iptables -w -A "$NETPOL_CHAIN" -j NFQUEUE --queue-num "$NETPOL_QUEUE" --queue-bypass
    while read -r jump; do
        # shellcheck disable=SC2086 # one rule's words
        in_netpol_ns iptables -w -C $jump 2>/dev/null || in_netpol_ns iptables -w -A $jump \
            || die "iptables -A $jump failed"
    done < <(netpol_jumps)
}

# netpol_kernel: br_netfilter and nfnetlink_queue, loaded if they are modules (built in here).
netpol_kernel() {
    local m
    for m in br_netfilter nfnetlink_queue xt_NFQUEUE; do modprobe -q "$m" 2>/dev/null || true; done
    [[ -w $BR_NF_SYSCTL ]] \
        || die "no $BR_NF_SYSCTL: NetworkPolicy between pods on the bridge needs br_netfilter"
    [[ -e /proc/net/netfilter/nfnetlink_queue ]] \
        || die "no /proc/net/netfilter/nfnetlink_queue: kube-network-policies needs nfnetlink_queue"
}

# netpol_up: builds (or finds cached) the daemon, starts it unless it runs, waits for its queue,
# then the bridge sysctl and the rules. Idempotent on a running cluster.
netpol_up() {
    local bin daemon kubeconfig=$STATE/kube-network-policies.kubeconfig
    daemon=$(netpol_daemon)
    netpol_kernel
    bin=$("$cluster_dir/build-netpol" 2>> "$LOGS/build-netpol.log") \
        || die "building kube-network-policies failed (see $LOGS/build-netpol.log)"
    if ! alive "$daemon" || [[ $(head -1 "$PIDS/$daemon.cmd") != "$bin" ]]; then
        alive "$daemon" && netpol_down
        netpol_queue_bound && die "nfqueue $NETPOL_QUEUE is bound by another process; set STEPSHIM_NETPOL_QUEUE"
        netpol_access
        if [[ -n ${NETPOL_NETNS:-} ]]; then
            # The node reaches the apiserver at the host's end of its veth (nodes.sh).
            kubeconfig=$STATE/$daemon.kubeconfig
            APISERVER=$NETPOL_APISERVER kubeconfig "$kubeconfig" kube-network-policies
            sed -i 's|^    server: .*|&\n    tls-server-name: localhost|' "$kubeconfig"
        fi
        LOG_HINT=$LOGS/$daemon.log
        DAEMON_NETNS=${NETPOL_NETNS:-} start_daemon "$daemon" "$bin" --kubeconfig="$kubeconfig" \
            --hostname-override="${NETPOL_NAME:-$NODE_NAME}" --nfqueue-id="$NETPOL_QUEUE"
        wait_for 60 "$daemon bound to nfqueue $NETPOL_QUEUE" netpol_queue_bound
        unset LOG_HINT
    fi
    if [[ -z ${NETPOL_NETNS:-} ]]; then
        [[ -f $STATE/netpol-sysctl.saved ]] || cat "$BR_NF_SYSCTL" > "$STATE/netpol-sysctl.saved"
    fi
    in_netpol_ns sh -c "echo 1 > $BR_NF_SYSCTL"
    netpol_rules
}

# netpol_down: the rules out first (no packet waits for a daemon that is stopping), then the
# daemon, then the sysctl as it was.
netpol_down() {
    local jump
    while read -r jump; do
        # shellcheck disable=SC2086
        while in_netpol_ns iptables -w -C $jump 2>/dev/null; do in_netpol_ns iptables -w -D $jump; done
    done < <(netpol_jumps)
    if in_netpol_ns iptables -w -S "$NETPOL_CHAIN" >/dev/null 2>&1; then
        in_netpol_ns iptables -w -F "$NETPOL_CHAIN" && in_netpol_ns iptables -w -X "$NETPOL_CHAIN" \
            || log "could not delete iptables chain $NETPOL_CHAIN"
    fi
    stop_daemons 15 "$(netpol_daemon)"
    if [[ -z ${NETPOL_NETNS:-} && -f $STATE/netpol-sysctl.saved ]]; then
        cat "$STATE/netpol-sysctl.saved" > "$BR_NF_SYSCTL" 2>/dev/null || true
        rm -f "$STATE/netpol-sysctl.saved"
    fi
}
