#!/usr/bin/env bash
# ci.sh: what CI runs for the cluster tiers: up, smoke, every executable tests/cluster/tests.d/*
# (the one-node tier; each gets KUBECONFIG and the cluster's kubectl on PATH), then up --nodes 3
# and every executable tests/cluster/tests.multi.d/* (the multi-node tier), then down.
# Always tears the cluster down, also on failure or interruption. Every step has a timeout.
# Ends with one "cluster: N passed, M failed" line; exits non-zero if anything failed.
# Timeouts (seconds) can be overridden: STEPSHIM_UP_TIMEOUT, STEPSHIM_CLUSTER_TEST_TIMEOUT (every
# test; otherwise a test's own "# budget: SECONDS" line, else 1200).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
start=$SECONDS
passed=0 failed=0

teardown() {
    trap - EXIT INT TERM
    echo "cluster-ci: down"
    timeout 300 "$here/down" || echo "cluster-ci: down failed" >&2
    echo "cluster-ci: total $((SECONDS - start))s"
    echo "cluster: $passed passed, $failed failed"
    (( failed == 0 && passed > 0 )) && exit 0
    exit 1
}
trap teardown EXIT
trap 'echo "cluster-ci: interrupted" >&2; failed=$((failed + 1)); exit 1' INT TERM

echo "cluster-ci: up ($(df -h --output=avail / | tail -1 | tr -d ' ') free on /)"
t=$SECONDS
# A cold machine compiles Kubernetes here (about 6 minutes on 2 cores, more if shared).
if ! env_lines=$(timeout "${STEPSHIM_UP_TIMEOUT:-3000}" "$here/up"); then
    echo "cluster-ci: FAIL: up did not bring the cluster up (logs: /var/lib/stepshim-cluster/logs)" >&2
    for f in /var/lib/stepshim-cluster/logs/*.log; do
        [[ -f $f ]] && { echo "--- last lines of $f"; tail -n 15 "$f"; } >&2
    done
    failed=$((failed + 1))
    exit 1
fi
eval "$env_lines"
echo "cluster-ci: up took $((SECONDS - t))s"

# The node's scheduling taints, one "key:effect" a line; none on a healthy node.
node_taints() {
    kubectl get nodes -o jsonpath='{range .items[*].spec.taints[*]}{.key}:{.effect}{"\n"}{end}' 2>/dev/null |
        grep -E ':(NoSchedule|NoExecute)$'
}

# node_fit SECS: waits up to SECS for the node to lose every scheduling taint (a pressure taint
# clears 30 s after the pressure ends). If it keeps one, says which, why (the node's conditions)
# and how full the disk is, and fails: every pod would only sit unscheduled until its test timed out.
node_fit() {
    local deadline=$((SECONDS + $1)) taints
    while taints=$(node_taints) && [[ -n $taints ]]; do
        if (( SECONDS >= deadline )); then
            echo "cluster-ci: the node cannot take pods: $(echo $taints)" >&2
            kubectl get nodes -o jsonpath='{range .items[*].status.conditions[?(@.status=="True")]}  {.type}: {.message}{"\n"}{end}' >&2 || true
            df -h /var/lib 2>/dev/null | sed 's/^/  /' >&2
            return 1
        fi
        sleep 5
    done
}

run() {
    local name=$1 secs=$2; shift 2
    local t=$SECONDS
    echo "cluster-ci: run $name"
    if ! node_fit 120; then
        failed=$((failed + 1))
        echo "cluster-ci: FAIL $name (not run: the node is tainted)" >&2
        return
    fi
    if timeout "$secs" "$@"; then
        passed=$((passed + 1))
        echo "cluster-ci: ok $name ($((SECONDS - t))s)"
    else
        failed=$((failed + 1))
        echo "cluster-ci: FAIL $name ($((SECONDS - t))s)" >&2
    fi
}

# run_dir DIR: every executable test in tests/cluster/DIR.
run_dir() {
    local t budget
    for t in "$here/$1"/*; do
        # A file CI would not run fails instead of being skipped in silence.
        if [[ ! -f $t || ! -x $t ]]; then
            failed=$((failed + 1))
            echo "cluster-ci: FAIL $1/$(basename "$t") (not an executable file: chmod +x it)" >&2
            continue
        fi
        # A test may state its own budget in a "# budget: SECONDS" line; 1200 s otherwise.
        budget=$(sed -n 's/^# budget: \([0-9][0-9]*\)$/\1/p' "$t" | head -n 1)
        run "$1/$(basename "$t")" "${STEPSHIM_CLUSTER_TEST_TIMEOUT:-${budget:-1200}}" "$t"
    done
}

# The one-node tier: everything that does not need more than one node.
run smoke 300 "$here/smoke"
[[ -d $here/tests.d ]] && run_dir tests.d
# The multi-node tier: two more nodes join the same cluster (up --nodes 3), then what crosses nodes.
if [[ -d $here/tests.multi.d ]]; then
    echo "cluster-ci: up --nodes 3"
    t=$SECONDS
    if env_lines=$(timeout "${STEPSHIM_UP_TIMEOUT:-900}" "$here/up" --nodes 3); then
        eval "$env_lines"
        echo "cluster-ci: up --nodes 3 took $((SECONDS - t))s"
        run_dir tests.multi.d
    else
        failed=$((failed + 1))
        echo "cluster-ci: FAIL: up --nodes 3 did not bring up the further nodes" >&2
        for f in /var/lib/stepshim-cluster/logs/*-n[0-9]*.log; do
            [[ -f $f ]] && { echo "--- last lines of $f"; tail -n 15 "$f"; } >&2
        done
    fi
fi
