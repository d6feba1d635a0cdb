# test-lib.sh: how every tests.d script speaks and fails, sourced once it has set $root:
#   say MSG    one line, prefixed with the test's file name
#   fail MSG   one line on stderr with FAIL, then exit 1 (a test may define its own after sourcing)
#   ok MSG     one more passed check, counted in $pass, and says so
_test_name=$(basename "$0")
: "${pass:=0}"
say() { echo "$_test_name: $*"; }
fail() { echo "$_test_name: FAIL: $*" >&2; exit 1; }
ok() { pass=$((pass + 1)); say "ok: $*"; }
