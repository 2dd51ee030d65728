#!/usr/bin/env bash
# Under systemd, bulkheadd's standard error is a stream into the journal,
# which stores a line at the unit's SyslogLevel= (info) unless it starts
# with a syslog priority ("<4>", systemd.exec(5)). With JOURNAL_STREAM naming
# its stderr, as systemd sets it, each line must carry its level's priority
# and no timestamp of its own; with stderr elsewhere, the plain lines stay.
# usage: check_journal_priority.sh BULKHEADD_BINARY
set -euo pipefail
binary=$1
fail() { echo "check_journal_priority: $*" >&2; exit 1; }
tmp=$(mktemp -d)
segment=bulkhead-journal-test-$$
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$tmp" "/dev/shm/$segment"' EXIT

# run JOURNAL: starts bulkheadd on its own segment with stderr in $tmp/log,
# JOURNAL_STREAM naming that file when JOURNAL is 1; a reload that changes
# the segment makes a warning; then a stop.
run() {
  local log=$tmp/log
  : >"$log"
  printf '[daemon]\nsegment = "%s"\nmetrics_listen = ""\n' "$segment" >"$tmp/config.toml"
  if [ "$1" = 1 ]; then
    JOURNAL_STREAM=$(stat -c '%d:%i' "$log") "$binary" --config "$tmp/config.toml" 2>>"$log" &
  else
    env -u JOURNAL_STREAM "$binary" --config "$tmp/config.toml" 2>>"$log" &
  fi
  pid=$!
  for _ in $(seq 100); do grep -q " on /dev/shm/$segment:" "$log" && break; sleep 0.05; done
  grep -q " on /dev/shm/$segment:" "$log" || fail "bulkheadd did not start: $(cat "$log")"
  printf '[daemon]\nsegment = "%s-other"\nmetrics_listen = ""\n' "$segment" >"$tmp/config.toml"
  kill -HUP "$pid"
  for _ in $(seq 100); do grep -q "reloaded" "$log" && break; sleep 0.05; done
  kill -TERM "$pid"
  wait "$pid" || fail "bulkheadd exited $?: $(cat "$log")"
  pid=""
  rm -f "/dev/shm/$segment"
  cat "$log"
}

journal=$(run 1)
echo "$journal"
grep -qx "<6>info bulkheadd .* on /dev/shm/$segment: .*" <<<"$journal" ||
  fail "the start line does not carry priority <6> (info)"
grep -qx "<4>warning reload: daemon.segment changes only on restart.*" <<<"$journal" ||
  fail "the reload's warning does not carry priority <4> (warning)"
if grep -v '^<[0-7]>' <<<"$journal"; then fail "lines above carry no syslog priority"; fi

plain=$(run 0)
grep -Eq "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+ warning reload: daemon.segment" <<<"$plain" ||
  fail "with stderr not the journal the lines lost their timestamp: $plain"
if grep '^<[0-7]>' <<<"$plain"; then fail "with stderr not the journal, lines above carry a priority"; fi
echo "ok: priorities <6> and <4> into the journal, timestamps elsewhere"
