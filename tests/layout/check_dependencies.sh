#!/usr/bin/env bash
# Dependencies point one way (docs/architecture.md): each part may include
# only the parts listed for it. Prints every include that breaks the rule.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
status=0

# part: the project folders its sources may include from ("" = none)
check() {
  local part=$1 allowed=$2
  while IFS= read -r line; do
    local file=${line%%:*} target
    target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
    local top=${target%%/*}
    [ "$top" = "$part" ] && continue
    case " $allowed " in *" $top "*) continue ;; esac
    echo "$file includes \"$target\": $part/ may include only from: ${allowed:-nothing}"
    status=1
  done < <(cd "$root" && grep -rHE '^#include "' "$part" || true)
}

check policies ""
check shm ""
check client "shm bulkhead"
check tomlread ""
check control "shm policies"
check daemon "shm policies control tomlread"
check tools "shm policies control tomlread"
# Nothing outside tests/ may include from daemon/ but daemon/ itself.
if grep -rlE '^#include "daemon/' "$root"/{shm,client,policies,control,tools,examples} 2>/dev/null; then
  echo "only daemon/ and tests/ may include daemon/ headers"
  status=1
fi
# The client library links no logging, metrics or config library.
if grep -rhE '^#include <(spdlog|prometheus|toml\+\+|CLI)/' "$root/client" "$root/shm" 2>/dev/null; then
  echo "client/ and shm/ must not use spdlog, prometheus-cpp, toml++ or CLI11"
  status=1
fi
[ $status -eq 0 ] && echo "dependencies point one way"
exit $status
