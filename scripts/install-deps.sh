#!/usr/bin/env bash
# Installs the Debian 12 packages bulkhead builds and tests with, if any is
# missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(
  cmake ninja-build pkg-config g++ make
  libboost-dev prometheus-cpp-dev libtomlplusplus-dev libspdlog-dev libfmt-dev
  libgtest-dev libbenchmark-dev libsystemd-dev libcli11-dev gnuplot-nox
  clang libclang-rt-14-dev  # tests/fuzz: libFuzzer (scripts/fuzz.sh); clang only recommends the runtime
  systemd procps  # tests/systemd: systemd-analyze, systemd-sysusers, and the unit's /bin/kill
  python3 dpkg-dev file binutils  # bindings/python's tests; cpack -G DEB (dpkg-shlibdeps, file), nm, readelf
  help2man man-db  # the man pages, made from each program's --help at build time (packaging/man); man -l and lexgrog check them
  postgresql libpq-dev  # bench/pgload: a real PostgreSQL server under overload (scripts/pg-overload.sh, the pg_overload test)
)

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
# apt-get update, waiting up to 10 minutes for the package lists' lock: on a
# fresh machine apt's daily timer may hold it, and update, unlike install,
# does not wait for a lock on its own (apt 2.6 ignores DPkg::Lock::Timeout
# there).
apt_update() {
  local out
  for _ in $(seq 60); do
    if out=$("${sudo[@]}" apt-get update -q 2>&1); then
      printf '%s\n' "$out"
      return 0
    fi
    if ! grep -q 'Could not get lock' <<<"$out"; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    echo "install-deps: apt's package lists are locked; waiting" >&2
    sleep 10
  done
  printf '%s\n' "$out" >&2
  return 1
}
need_root() {
  [ ${#sudo[@]} -eq 0 ] || command -v sudo >/dev/null ||
    { echo "install-deps: need root or sudo to $*" >&2; exit 1; }
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  need_root "install ${missing[*]}"
  apt_update
  # env: sudo's env_reset would drop a variable set before it. The lock
  # timeout: on a fresh machine unattended-upgrades may hold dpkg's lock.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi

# Prometheus' own promtool and prometheus, for tests/prometheus: only the two
# static binaries of Debian's prometheus package (the package with its
# recommends is 332 MB), extracted into $BULKHEAD_TOOLS_DIR/bin, by default
# .deps/bin in the checkout (cmake -DBULKHEAD_PROMETHEUS_DIR=... elsewhere).
root=$(cd "$(dirname "$0")/.." && pwd)
tools=${BULKHEAD_TOOLS_DIR:-$root/.deps}
if [ -x "$tools/bin/promtool" ] && [ -x "$tools/bin/prometheus" ]; then
  exit 0
fi
echo "install-deps: extracting promtool and prometheus from Debian's prometheus package into $tools/bin"
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
if ! (cd "$download" && apt-get download -q prometheus >/dev/null 2>&1); then
  need_root "update apt's package lists"
  apt_update
  (cd "$download" && apt-get download -q prometheus)
fi
dpkg-deb --fsys-tarfile "$download"/prometheus_*.deb |
  tar -x -C "$download" ./usr/bin/promtool ./usr/bin/prometheus
mkdir -p "$tools/bin"
mv "$download/usr/bin/promtool" "$download/usr/bin/prometheus" "$tools/bin/"
"$tools/bin/promtool" --version 2>&1 | sed -n 1p
