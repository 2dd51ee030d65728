#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs
# bulkheadd on its embedded default config with the demo workload beside it.
# The daemon uses its own segment (/dev/shm/bulkhead-demo) and an ephemeral
# metrics port, so it does not disturb a bulkheadd already running here.
# However it ends (done, Ctrl-C, SIGTERM, the daemon failing), it stops
# what it started and removes the segment. It fails, with the daemon's log,
# if the daemon stops during the demo or does not exit 0 when stopped at
# the end (a crash at shutdown, a sanitizer's report).
#
# Environment: BUILD_DIR (default build/), DEMO_SECONDS (30), DEMO_SEGMENT
# (bulkhead-demo), DEMO_NO_BUILD=1 to run what BUILD_DIR holds without
# installing or building (ctest's `demo` does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
seconds=${DEMO_SECONDS:-30}
segment=${DEMO_SEGMENT:-bulkhead-demo}

if [ -z "${DEMO_NO_BUILD:-}" ]; then
  "$root/scripts/install-deps.sh"
  "$root/scripts/build.sh"
fi

# The daemon logs into a file of this run's until it has started, then
# renamed (it writes on): a run refused the segment (another demo runs on
# it) leaves the log of the one running alone.
log="$build/$segment-bulkheadd.log"
starting=$(mktemp "$build/$segment-bulkheadd.XXXXXX.log")
daemon_log=$starting  # where the daemon's log is now
daemon="" demo="" ours=""
cleanup() {
  rm -f "$starting"
  if [ -n "$demo" ]; then kill "$demo" 2>/dev/null || true; fi
  if [ -n "$daemon" ]; then
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  # Only a segment this run's daemon made or ran on: one another bulkheadd
  # serves (this one then refuses to start) is that daemon's clients'.
  if [ -n "$ours" ]; then rm -f "/dev/shm/$segment"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The daemon's error, if it stopped, and this script's failure.
daemon_failed() {
  echo "demo: $1; bulkheadd's log:" >&2
  cat "$daemon_log" >&2
  exit 1
}

[ -e "/dev/shm/$segment" ] || ours=1
"$build/daemon/bulkheadd" --segment "$segment" --metrics-listen 127.0.0.1:0 2>"$starting" &
daemon=$!
# Up once it logs its start line ("bulkheadd VERSION on /dev/shm/..."),
# which comes after the segment and the metrics endpoint.
for _ in $(seq 200); do
  grep -q " on /dev/shm/$segment:" "$starting" && break
  kill -0 "$daemon" 2>/dev/null || daemon_failed "bulkheadd exited at start"
  sleep 0.05
done
grep -q " on /dev/shm/$segment:" "$starting" || daemon_failed "bulkheadd did not start within 10 s"
ours=1
mv -f "$starting" "$log"
daemon_log=$log
grep -h "metrics on" "$log" || true

"$build/examples/bulkhead-demo" --segment "$segment" --seconds "$seconds" &
demo=$!
if ! wait "$demo"; then
  demo=""
  kill -0 "$daemon" 2>/dev/null || daemon_failed "bulkheadd stopped during the demo"
  exit 1
fi
demo=""
# The demo runs on when the daemon dies (its clients go on without it), so
# its success says nothing of the daemon's.
kill -0 "$daemon" 2>/dev/null || daemon_failed "bulkheadd stopped during the demo"
kill "$daemon" 2>/dev/null || true
status=0
wait "$daemon" || status=$?
daemon=""
[ "$status" -eq 0 ] || daemon_failed "bulkheadd exited with status $status when stopped"
echo "bulkheadd's log: $log"
