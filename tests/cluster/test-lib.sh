# test-lib.sh: how every tests.d script speaks and fails (and sa_kubeconfig, below), sourced once it
# has set $root:
#   say MSG    one line, prefixed with the test's file name
#   fail MSG   one line on stderr with FAIL, then exit 1 (a test may define its own after sourcing)
#   ok MSG     one more passed check, counted in $pass, and says so
_test_name=$(basename "$0")
: "${pass:=0}"
say() { echo "$_test_name: $*"; }
fail() { echo "$_test_name: FAIL: $*" >&2; exit 1; }
ok() { pass=$((pass + 1)); say "ok: $*"; }

# sa_kubeconfig NS SA FILE: a kubeconfig in FILE for ServiceAccount SA of namespace NS (an hour's
# token), on the cluster and CA of the current kubeconfig, NS as its namespace.
sa_kubeconfig() {
    local token server ca
    token=$(kubectl -n "$1" create token "$2" --duration=1h)
    server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
    ca=$(mktemp)
    kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$ca"
    KUBECONFIG=$3 kubectl config set-cluster c --server="$server" --certificate-authority="$ca" --embed-certs >/dev/null
    KUBECONFIG=$3 kubectl config set-credentials "$2" --token="$token" >/dev/null
    KUBECONFIG=$3 kubectl config set-context w --cluster=c --user="$2" --namespace="$1" >/dev/null
    KUBECONFIG=$3 kubectl config use-context w >/dev/null
    rm -f "$ca"
}
