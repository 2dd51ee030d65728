#!/usr/bin/env bash
# A real dependency under overload (issue 7, item 4): starts a throw-away
# PostgreSQL server (Debian's package, Unix socket in a scratch directory,
# no TCP), measures its healthy capacity, then runs the same open-loop load
# three times through bulkhead-pgload: with no limiter, with a static
# bulkhead (bulkheadd, policy "fixed", limit = the healthy knee) and with
# bulkhead's adaptive policy (bulkheadd, policy "balance"). The offered load
# rises past what the server can do, and the server is made slower mid-run
# (a plan regression: ALTER SYSTEM turns index scans off). Prints goodput,
# p50/p99 latency of successful queries, timeouts, errors and rejections
# per mode, writes a per-second CSV per mode and gnuplot plots.
#
#   scripts/pg-overload.sh                  # the full run, about 9 minutes
#   scripts/pg-overload.sh --short --check  # the test suite's version, < 1 min:
#                                           # fails unless adaptive had fewer
#                                           # timeouts than no limiter
#   options: --out DIR (default BUILD_DIR/pg-overload), --plots DIR (PNGs;
#            default: the --out directory), --no-static, --replot (only the
#            table and plots again, from the CSVs and summary in --out)
#
# The server, bulkheadd and the scratch directory are removed on exit, and
# by guards once the script is gone if it was killed with SIGKILL.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
variant=full
check=false
with_static=true
replot=false
out=""
plots=""
while [ $# -gt 0 ]; do
  case $1 in
    --short) variant=short ;;
    --check) check=true ;;
    --no-static) with_static=false ;;
    --replot) replot=true ;;
    --out) out=$2; shift ;;
    --plots) plots=$2; shift ;;
    --build) build=$2; shift ;;
    *) echo "pg-overload: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-$build/pg-overload}
plots=${plots:-$out}
pgload=$build/bench/pgload/bulkhead-pgload
bulkheadd=$build/daemon/bulkheadd
for b in "$pgload" "$bulkheadd"; do
  if [ ! -x "$b" ]; then
    echo "pg-overload: $b is not built; bulkhead-pgload needs libpq (libpq-dev): run scripts/install-deps.sh, then scripts/build.sh" >&2
    exit 1
  fi
done
source "$root/bench/pgload/pgserver.sh"
pg_bindir >/dev/null  # fails with a clear message when PostgreSQL is missing

# The load. full: the rate rises from 0.5x to 3x the measured capacity over
# 60 s and stays there; the server is slowed from 80 s to 115 s. short: 4x
# the capacity from the start, no slow phase, 12 s per mode.
if [ $variant = full ]; then
  processes=4 connections=64 duration=150 profile="0:0.5,10:0.5,60:3" slow="80:115"
  step_seconds=2 max_concurrency=12
  phases=(--phase rising:0:60 --phase overload:60:80 --phase slowed:80:115 --phase recovered:115:150)
else
  processes=2 connections=80 duration=12 profile="0:4" slow=""
  step_seconds=1 max_concurrency=6
  phases=()
fi
timeout_ms=100
max_connections=$((processes * connections + 10))

modes=(none)
$with_static && modes+=(static)
modes+=(adaptive)
summary="$out/summary.txt"
mkdir -p "$out" "$plots"

run_all() {
scratch=$(mktemp -d "${TMPDIR:-/tmp}/bh-pg.XXXXXX")
chmod 755 "$scratch"
segment=bh-pg-$$
daemon=""
cleanup() {
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  pg_stop "$scratch"
  rm -rf "$scratch"
  rm -f "/dev/shm/$segment"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "pg-overload: starting PostgreSQL in $scratch (max_connections $max_connections)"
pg_start "$scratch" "$max_connections"
"$pgload" setup --conninfo "$PG_CONNINFO" --rows 100000
calibration=$("$pgload" calibrate --conninfo "$PG_CONNINFO" --step-seconds "$step_seconds" \
  --max-concurrency "$max_concurrency")
echo "pg-overload: $calibration"
capacity=$(sed -n 's/.*capacity_qps=\([0-9.]*\).*/\1/p' <<<"$calibration")
knee=$(sed -n 's/.*knee=\([0-9]*\).*/\1/p' <<<"$calibration")

start_daemon() {  # $1: the [defaults] table's body
  rm -f "/dev/shm/$segment"
  cat >"$scratch/bulkhead.toml" <<EOF
[daemon]
segment = "$segment"
metrics_listen = ""
max_processes = 64
[defaults]
$1
EOF
  "$bulkheadd" --config "$scratch/bulkhead.toml" 2>"$out/$mode-bulkheadd.log" &
  daemon=$!
  # As pg_start's guard does for the server: once this shell is gone while
  # the daemon still runs (killed with SIGKILL, as ctest does on a timeout,
  # so that the trap could not stop it), stop the daemon and remove its
  # segment. A daemon stopped first ends the guard.
  setsid -f bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
    kill "$2" 2>/dev/null || exit 0
    while kill -0 "$2" 2>/dev/null; do sleep 0.1; done
    rm -f "/dev/shm/$3"' bulkheadd-guard "$$" "$daemon" "$segment" </dev/null >/dev/null 2>&1
  for _ in $(seq 200); do [ -e "/dev/shm/$segment" ] && return 0; sleep 0.05; done
  echo "pg-overload: bulkheadd did not create its segment:" >&2
  cat "$out/$mode-bulkheadd.log" >&2
  exit 1
}
stop_daemon() {
  kill "$daemon"
  wait "$daemon" || true
  daemon=""
}

: >"$summary"
for mode in "${modes[@]}"; do
  bulkhead_args=()
  case $mode in
    static) start_daemon "policy = \"fixed\"
initial_limit = $knee"; bulkhead_args=(--segment "$segment") ;;
    adaptive) start_daemon "policy = \"balance\""; bulkhead_args=(--segment "$segment") ;;
  esac
  echo "pg-overload: $mode: ${duration} s"
  "$pgload" run --conninfo "$PG_CONNINFO" "${bulkhead_args[@]}" --capacity "$capacity" \
    --profile "$profile" --duration "$duration" --processes "$processes" --connections "$connections" \
    --timeout-ms "$timeout_ms" ${slow:+--slow "$slow"} "${phases[@]}" --out "$out/$mode" --label "$mode" |
    tee -a "$summary"
  [ -z "$daemon" ] || stop_daemon
done
echo "PostgreSQL $(basename "$(dirname "$(pg_bindir)")"), capacity $capacity q/s, knee $knee (static limit)," \
  "timeout ${timeout_ms} ms, $processes processes x $connections connections" >"$out/setup.txt"
pg_stop "$scratch"
}
if $replot; then
  [ -f "$summary" ] || { echo "pg-overload: --replot: no $summary" >&2; exit 1; }
else
  run_all
fi

field() {  # field MODE PHASE KEY
  awk -v m="$1" -v p="$2" -v k="$3" '$1 == m && $2 == p { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$summary"
}

echo
cat "$out/setup.txt"
printf '| mode | phase | offered q/s | goodput q/s | p50 ms | p99 ms | timeouts | errors | rejected | no connection |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n'
awk '{ row = "| " $1 " | " $2; for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] != "ok") row = row " | " kv[2] } print row " |" }' "$summary"

if command -v gnuplot >/dev/null; then
  color() { case $1 in none) echo "#cc3311" ;; static) echo "#0077bb" ;; adaptive) echo "#009944" ;; esac; }
  plot_lines() {  # plot_lines COLUMN [MODES...]: one line per mode
    local column=$1 sep="" m
    shift
    for m in "$@"; do
      printf '%s"%s/%s.csv" using ($1+0.5):%s with lines lw 2 lc rgb "%s" title "%s"' \
        "$sep" "$out" "$m" "$column" "$(color "$m")" "$m"
      sep=", "
    done
  }
  limited=()
  for m in "${modes[@]}"; do [ "$m" = none ] || limited+=("$m"); done
  title="PostgreSQL under open-loop overload"
  slowbox=""
  if [ "$variant" = full ]; then
    title="$title: offered load 0.5x to 3x the measured capacity; server slowed in the shaded span"
    slowbox="set object 1 rect from ${slow%%:*}, graph 0 to ${slow##*:}, graph 1 behind fillcolor rgb '#e8e8e8' fillstyle solid noborder"
  else
    title="$title: offered load 4x the measured capacity"
  fi
  gnuplot <<EOF
set terminal pngcairo size 1000,1150 font ",10"
set output "$plots/pg-overload-$variant.png"
set multiplot layout 4,1 title "$title"
$slowbox
set key outside right
set grid
set xlabel "time (s)"
set xrange [0:*]
set ylabel "queries/s"
set title "goodput (successful queries per second; dashed: offered)"
plot $(plot_lines 4 "${modes[@]}"), "$out/none.csv" using (\$1+0.5):3 with lines dt 2 lw 1.5 lc rgb "black" title "offered"
set title "p99 latency of successful queries (the timeout is $timeout_ms ms)"
set ylabel "ms"
set logscale y
plot $(plot_lines 10 "${modes[@]}")
unset logscale y
set title "timeouts per second"
set ylabel "queries/s"
plot $(plot_lines 5 "${modes[@]}")
set title "bulkhead's limit (mean over each second)"
set ylabel "concurrent queries"
set yrange [0:*]
plot $(plot_lines 11 "${limited[@]}")
unset multiplot
EOF
  echo "pg-overload: plot $plots/pg-overload-$variant.png"
fi
echo "pg-overload: per-second CSV in $out/{$(IFS=,; echo "${modes[*]}")}.csv"

if $check; then
  none=$(field none all timeouts)
  adaptive=$(field adaptive all timeouts)
  echo "pg-overload: timeouts: none $none, adaptive $adaptive"
  # An empty or garbled field would fail the tests below inside an `if`,
  # which set -e lets pass.
  if ! [[ $none =~ ^[0-9]+$ && $adaptive =~ ^[0-9]+$ ]]; then
    echo "pg-overload: FAIL: the summary has no timeout count for the unlimited or the adaptive run" >&2
    exit 1
  fi
  if [ "$none" -eq 0 ]; then
    echo "pg-overload: FAIL: the unlimited run had no timeouts: the load did not overload the server" >&2
    exit 1
  fi
  if [ "$adaptive" -ge "$none" ]; then
    echo "pg-overload: FAIL: the adaptive run had no fewer timeouts ($adaptive) than the unlimited one ($none)" >&2
    exit 1
  fi
  echo "pg-overload: ok: the adaptive run had fewer timeouts than the unlimited run"
fi
