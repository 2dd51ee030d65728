#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (ASan+UBSan) and
# runs each for BULKHEAD_FUZZ_SECONDS (default 30) from its seed corpus.
# scripts/test.sh --sanitizers (CI) runs it after the sanitizer suites.
#
#   scripts/fuzz.sh                 build and run every fuzzer
#   BULKHEAD_FUZZ_SECONDS=600 scripts/fuzz.sh   a longer run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${BULKHEAD_FUZZ_SECONDS:-30}

"$root/scripts/install-deps.sh"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DBULKHEAD_FUZZ=ON -DBULKHEAD_WERROR=ON \
  -DBULKHEAD_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target config_fuzzer segment_fuzzer client_fuzzer
(cd "$build" && ctest -L fuzz --output-on-failure --no-tests=error --timeout $((seconds + 120)))
