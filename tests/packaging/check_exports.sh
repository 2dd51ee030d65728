#!/usr/bin/env bash
# libbulkhead.so exports the C ABI and nothing else (a ctest):
#   - its soname is the expected one;
#   - every defined dynamic symbol is a bh_* function bound to a BULKHEAD_*
#     version node, or such a version node itself;
#   - every function bulkhead.h declares BH_API is exported, and nothing
#     bh_* is exported that the header does not declare.
# usage: check_exports.sh LIBRARY EXPECTED_SONAME HEADER
set -euo pipefail
lib=$1
soname=$2
header=$3
fail() { echo "check_exports: $*" >&2; exit 1; }
[ -f "$lib" ] || fail "$lib: not built"

got=$(readelf -d -W "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$got" = "$soname" ] || fail "soname is '$got', not '$soname'"

# nm -D prints "VALUE TYPE NAME@@VERSION" (or NAME@VERSION for an older
# node); a version node is an absolute symbol (type A) named after itself.
exports=$(nm -D --defined-only --with-symbol-versions "$lib")
stray=$(awk '
  $2 == "A" && $3 ~ /^BULKHEAD_[0-9.]+(@@?BULKHEAD_[0-9.]+)?$/ { next }
  $3 ~ /^bh_[a-z0-9_]+@@?BULKHEAD_[0-9.]+$/ { next }
  { print }' <<<"$exports")
[ -z "$stray" ] || fail "exports more than the versioned bh_* ABI:
$stray"

exported=$(awk '$3 ~ /^bh_/ { sub(/@.*/, "", $3); print $3 }' <<<"$exports" | sort -u)
declared=$(tr '\n' ' ' <"$header" | grep -oE 'BH_API [^;(]*\bbh_[a-z0-9_]+ *\(' |
  grep -oE 'bh_[a-z0-9_]+ *\($' | tr -d ' (' | sort -u)
[ -n "$declared" ] || fail "found no BH_API declaration in $header"
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
[ -z "$missing" ] || fail "declared BH_API in $(basename "$header") but not exported: $missing"
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
[ -z "$extra" ] || fail "exported but not declared in $(basename "$header"): $extra"

echo "ok: $soname exports $(wc -l <<<"$exported") bh_* functions, all declared, all versioned, nothing else"
