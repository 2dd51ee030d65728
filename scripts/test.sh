#!/usr/bin/env bash
# The README's second command, and what CI runs: installs what is missing,
# builds with warnings as errors, and runs the whole test suite under ctest.
#
#   scripts/test.sh               the suite, once
#   scripts/test.sh --sanitizers  the suite three times: as above, then built
#                                 with ASan+UBSan, then with TSan; then the
#                                 libFuzzer harnesses, 30 s each (what .ci/run does)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitizers=false
case "$#:${1:-}" in
  0:) ;;
  1:--sanitizers) sanitizers=true ;;
  *) echo "usage: $0 [--sanitizers]" >&2; exit 2 ;;
esac

"$root/scripts/install-deps.sh"

run_suite() {  # build dir, extra cmake arguments...
  local dir=$1
  shift
  BUILD_DIR=$dir "$root/scripts/build.sh" -DBULKHEAD_WERROR=ON "$@"
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j "${JOBS:-2}" --timeout 300)
}

run_suite "${BUILD_DIR:-$root/build-test}"
if $sanitizers; then
  echo "== the suite under AddressSanitizer + UndefinedBehaviorSanitizer"
  run_suite "$root/build-asan" -DBULKHEAD_SANITIZE=address -DBULKHEAD_BUILD_BENCH=OFF
  echo "== the suite under ThreadSanitizer"
  run_suite "$root/build-tsan" -DBULKHEAD_SANITIZE=thread -DBULKHEAD_BUILD_BENCH=OFF
  echo "== the libFuzzer harnesses (clang, ASan+UBSan)"
  "$root/scripts/fuzz.sh"
fi
