#!/usr/bin/env bash
# ctest `demo_failures`: scripts/demo.sh fails, showing the daemon's log,
# when the daemon dies during a demo that itself succeeds, or exits non-zero
# when stopped at the end (a crash at shutdown, a sanitizer's report), and
# still removes its segment. Stand-ins for bulkheadd and bulkhead-demo.
set -euo pipefail
src=$1
fail() { echo "demo_failures_test: $*" >&2; exit 1; }
build=$(mktemp -d "${TMPDIR:-/tmp}/bh-demo-failures.XXXXXX")
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/daemon" "$build/examples"
cat >"$build/daemon/bulkheadd" <<'DAEMON'
#!/usr/bin/env bash
: >"/dev/shm/$2"
echo "bulkheadd 0 on /dev/shm/$2: stand-in" >&2
trap 'echo "stand-in: stopping" >&2; exit "${STANDIN_STOP_STATUS:-0}"' TERM
if [ -n "${STANDIN_DIE_AFTER:-}" ]; then sleep "$STANDIN_DIE_AFTER"; echo "stand-in: died" >&2; exit 3; fi
while :; do sleep 0.05; done
DAEMON
printf '#!/bin/sh\nsleep 1\n' >"$build/examples/bulkhead-demo"
chmod +x "$build/daemon/bulkheadd" "$build/examples/bulkhead-demo"

run() {  # run NAME ENV...: demo.sh's output, and its status in $status
  segment="bhtest-demofail-$1-$$"
  shift
  status=0
  out=$(env "$@" BUILD_DIR="$build" DEMO_NO_BUILD=1 DEMO_SEGMENT="$segment" bash "$src/scripts/demo.sh" 2>&1) ||
    status=$?
  echo "$out"
  [ ! -e "/dev/shm/$segment" ] || { rm -f "/dev/shm/$segment"; fail "/dev/shm/$segment left behind"; }
}

run ok STANDIN_STOP_STATUS=0
[ "$status" -eq 0 ] || fail "a clean run exited $status"

run stop STANDIN_STOP_STATUS=1
[ "$status" -ne 0 ] || fail "a daemon that exited 1 when stopped did not fail the demo"
grep -q "exited with status 1 when stopped" <<<"$out" || fail "no word of the daemon's exit status"
grep -q "stand-in: stopping" <<<"$out" || fail "the daemon's log is not shown"

run died STANDIN_DIE_AFTER=0.2
[ "$status" -ne 0 ] || fail "a daemon that died during the demo did not fail it"
grep -q "stand-in: died" <<<"$out" || fail "the daemon's log is not shown"
echo "demo_failures_test: ok"
