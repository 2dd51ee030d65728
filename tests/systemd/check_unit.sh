#!/usr/bin/env bash
# Checks systemd/bulkheadd.service and systemd/bulkhead.sysusers with
# systemd's own tools, as a ctest:
#   - systemd-analyze verify prints nothing (it exits 0 on unknown keys, so
#     any output is a failure); it needs ExecStart's binary to exist, so a
#     copy of the unit points at the built bulkheadd;
#   - systemd-analyze security --offline=yes scores it at most 2.0;
#   - the unit keeps the settings the daemon's design depends on;
#   - systemd-sysusers creates the user and group the unit runs as.
# usage: check_unit.sh SOURCE_DIR BULKHEADD_BINARY
set -euo pipefail
src=$1
binary=$2
max_exposure=2.0

fail() { echo "check_unit: $*" >&2; exit 1; }
command -v systemd-analyze >/dev/null ||
  fail "systemd-analyze not found: install Debian's systemd package (scripts/install-deps.sh does)"
[ -x "$binary" ] || fail "$binary: not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unit=$tmp/bulkheadd.service
sed "s#^ExecStart=/usr/bin/bulkheadd #ExecStart=$binary #" "$src/systemd/bulkheadd.service" > "$unit"
grep -q "^ExecStart=$binary " "$unit" || fail "the unit's ExecStart= no longer starts /usr/bin/bulkheadd"

echo "== systemd-analyze verify"
out=$(systemd-analyze verify --man=no "$unit" 2>&1) || fail "verify exited $?: $out"
[ -z "$out" ] || fail "verify complained:
$out"

echo "== systemd-analyze security"
security=$(systemd-analyze security --offline=yes "$unit" 2>&1) || true
echo "$security" | grep -E '^(✗|-) |Overall' || true  # ✗ in UTF-8, - in ASCII
score=$(echo "$security" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "no exposure level in systemd-analyze security's output:
$security"
awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s <= m) }' ||
  fail "exposure level $score is above $max_exposure"

echo "== settings the daemon depends on"
require() { grep -qx "$1" "$src/systemd/bulkheadd.service" || fail "the unit lacks '$1': $2"; }
require "Type=notify" "bulkheadd says READY=1 once the segment is published"
require "WatchdogSec=10s" "bulkheadd says WATCHDOG=1 every tick"
require "ExecReload=/bin/kill -HUP \$MAINPID" "SIGHUP reloads the config"
require "RemoveIPC=no" "the segment must survive a stop"
require "User=bulkhead" "a fixed user from bulkhead.sysusers"
require "RestartPreventExitStatus=78" "a wrong config (EX_CONFIG) is not retried: a restart finds it again"
require "Group=bulkhead" "clients in this group may attach"
if grep -q '^DynamicUser=yes' "$src/systemd/bulkheadd.service"; then
  fail "DynamicUser=yes forces RemoveIPC=yes: the segment would vanish on every stop"
fi
if grep -q '^ProtectProc=' "$src/systemd/bulkheadd.service"; then
  fail "ProtectProc= hides clients' /proc/<pid>/stat: the daemon could no longer tell a reused pid"
fi

echo "== systemd-sysusers"
command -v systemd-sysusers >/dev/null || fail "systemd-sysusers not found (Debian's systemd package)"
mkdir -p "$tmp/root/etc"
systemd-sysusers --root="$tmp/root" "$src/systemd/bulkhead.sysusers" 2>&1 |
  grep -v '^Creating ' || true
grep -q '^bulkhead:' "$tmp/root/etc/passwd" || fail "bulkhead.sysusers creates no user bulkhead"
gid=$(awk -F: '$1 == "bulkhead" { print $3 }' "$tmp/root/etc/group")
[ -n "$gid" ] || fail "bulkhead.sysusers creates no group bulkhead"
awk -F: -v g="$gid" '$1 == "bulkhead" && $4 == g { ok = 1 } END { exit !ok }' "$tmp/root/etc/passwd" ||
  fail "user bulkhead's primary group is not bulkhead"
echo "ok: verify silent, exposure $score (<= $max_exposure), sysusers creates bulkhead:bulkhead"
