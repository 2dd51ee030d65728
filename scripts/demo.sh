#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs
# bulkheadd on its embedded default config with the demo workload beside it.
# The daemon uses its own segment (/dev/shm/bulkhead-demo) and an ephemeral
# metrics port, so it does not disturb a bulkheadd already running here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
seconds=${DEMO_SECONDS:-30}

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"

segment=bulkhead-demo
rm -f "/dev/shm/$segment"
"$build/daemon/bulkheadd" --segment "$segment" --metrics-listen 127.0.0.1:0 2>"$build/demo-bulkheadd.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -f /dev/shm/$segment' EXIT
for _ in $(seq 100); do [ -e "/dev/shm/$segment" ] && break; sleep 0.05; done
grep -h "metrics on" "$build/demo-bulkheadd.log" || true
"$build/examples/bulkhead-demo" --segment "$segment" --seconds "$seconds"
echo "bulkheadd's log: $build/demo-bulkheadd.log"
