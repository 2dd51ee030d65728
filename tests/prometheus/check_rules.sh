#!/usr/bin/env bash
# The alert rules and the example scrape config in docs/prometheus, checked
# by Prometheus' own promtool: the rules parse (check rules), every alert
# fires on the series it should and only those (test rules, with
# bulkhead-alerts.test.yml), and prometheus.yml is a valid config.
# usage: check_rules.sh SOURCE_DIR PROMTOOL
set -euo pipefail
src=$1
promtool=$2
[ -x "$promtool" ] || {
  echo "check_rules: no promtool at $promtool: run scripts/install-deps.sh (it extracts Debian's" \
    "promtool into .deps/bin) or configure with -DBULKHEAD_PROMETHEUS_DIR=DIR" >&2
  exit 1
}
cd "$src/docs/prometheus"
"$promtool" check rules bulkhead-alerts.yml
"$promtool" test rules bulkhead-alerts.test.yml
"$promtool" check config prometheus.yml
