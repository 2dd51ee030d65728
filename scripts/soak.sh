#!/usr/bin/env bash
# The soak test (tests/soak): many processes and threads on many
# dependencies while bulkheadd reloads its config every half second, for
# BULKHEAD_SOAK_SECONDS (default 120). Not part of scripts/test.sh.
#
#   scripts/soak.sh                          two minutes
#   BULKHEAD_SOAK_SECONDS=1800 scripts/soak.sh   half an hour
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
"$build/tests/soak/soak_test"
