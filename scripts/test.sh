#!/usr/bin/env bash
# The README's second command, and what CI runs: installs what is missing,
# builds with warnings as errors, and runs the whole test suite under ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export BUILD_DIR=${BUILD_DIR:-$root/build-test}

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" -DBULKHEAD_WERROR=ON
cd "$BUILD_DIR"
ctest --output-on-failure -j "${JOBS:-2}" --timeout 300
