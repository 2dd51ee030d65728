#!/usr/bin/env bash
# ctest `demo`: the README's first command, scripts/demo.sh, on the built
# tree (DEMO_NO_BUILD: ctest must not rebuild what it tests) for a short
# run on a segment of its own. It must exit 0, print a line per dependency
# per second, mark the slow phase, show payments' limit learned (moved off
# the 20 every new name starts at), and leave no segment or process behind.
set -euo pipefail
src=$1 build=$2
seconds=6
segment="bhtest-demo-$$"
fail() { echo "demo_test: $*" >&2; exit 1; }

out=$(BUILD_DIR="$build" DEMO_NO_BUILD=1 DEMO_SECONDS=$seconds DEMO_SEGMENT="$segment" \
  bash "$src/scripts/demo.sh" 2>&1) || { echo "$out" >&2; fail "scripts/demo.sh exited non-zero"; }
echo "$out"

rows() { awk -v d="$1" '$1 ~ /^[0-9]+$/ && $2 == d' <<<"$out"; }
[ "$(rows payments | wc -l)" -eq "$seconds" ] || fail "not one payments line per second"
[ "$(rows recs | wc -l)" -eq "$seconds" ] || fail "not one recs line per second"
rows payments | grep -q "<- latency x5" || fail "no payments line marks the slow phase"
rows payments | awk '$3 != 20 { moved = 1 } END { exit !moved }' ||
  fail "payments' limit never moved off its initial 20: nothing was learned"
rows payments | awk '$7 + 0 > 0 { served = 1 } END { exit !served }' || fail "payments admitted no call"  # admitted/s
grep -q "metrics on http://127.0.0.1:" <<<"$out" || fail "the daemon's metrics address is not shown"

[ ! -e "/dev/shm/$segment" ] || fail "/dev/shm/$segment left behind"
! pgrep -f -- "--segment $segment" >/dev/null || fail "a process of the demo is still running"
rm -f "$build/$segment-bulkheadd.log"
echo "demo_test: ok"
