#!/usr/bin/env bash
# Installs the Debian 12 packages bulkhead builds and tests with, if any is
# missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(
  cmake ninja-build pkg-config g++ make
  libboost-dev prometheus-cpp-dev libtomlplusplus-dev libspdlog-dev libfmt-dev
  libgtest-dev libbenchmark-dev libsystemd-dev libcli11-dev gnuplot-nox
  systemd procps  # tests/systemd: systemd-analyze, systemd-sysusers, and the unit's /bin/kill
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
