#!/usr/bin/env bash
# `cpack -G DEB` makes the four packages, and each holds what it should: a
# ctest. No root needed: the packages are read with dpkg-deb -I/-c/-f and
# unpacked into a scratch root with dpkg-deb -x, never installed.
# usage: deb_test.sh SOURCE_DIR BUILD_DIR PYTHON3 [NAME=VALUE...]
#   PYTHON3 runs the binding's tests on the packaged module, with the
#   NAME=VALUEs in its environment (what a sanitized library needs).
set -euo pipefail
src=$1
build=$2
python3=$3
shift 3
fail() { echo "deb_test: $*" >&2; exit 1; }
command -v dpkg-shlibdeps >/dev/null ||
  fail "dpkg-shlibdeps not found: install Debian's dpkg-dev package (scripts/install-deps.sh does)"

work=$build/deb-test
rm -rf "$work"
mkdir -p "$work"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
major=${version%%.*}
arch=$(dpkg --print-architecture)

echo "== cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$work") >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack failed"; }
daemon=$work/bulkhead_${version}_$arch.deb
lib=$work/libbulkhead${major}_${version}_$arch.deb
dev=$work/bulkhead-dev_${version}_$arch.deb
python=$work/python3-bulkhead_${version}_all.deb
for deb in "$daemon" "$lib" "$dev" "$python"; do
  [ -f "$deb" ] || fail "cpack made no $(basename "$deb"); it made: $(cd "$work" && ls -- *.deb 2>/dev/null)"
  dpkg-deb -I "$deb" >/dev/null || fail "dpkg-deb cannot read $(basename "$deb")"
done

# files DEB: the regular files and symlinks it holds, "./path" one a line.
files() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ { sub(/ -> .*/, ""); print $6 }' | sort; }
# has DEB PATH...: each path is in the package.
has() {
  local deb=$1 list
  shift
  list=$(files "$deb")
  for p in "$@"; do grep -qx "./$p" <<<"$list" || fail "$(basename "$deb") lacks /$p"; done
}
field() { dpkg-deb -f "$1" "$2"; }

echo "== contents"
has "$daemon" usr/bin/bulkheadd usr/bin/bulkheadctl lib/systemd/system/bulkheadd.service usr/lib/sysusers.d/bulkhead.conf \
  etc/bulkhead/bulkhead.toml usr/share/doc/bulkhead/README.md usr/share/man/man8/bulkheadd.8.gz \
  usr/share/man/man1/bulkheadctl.1.gz usr/share/doc/bulkhead/docs/operations.md \
  usr/share/doc/bulkhead/docs/prometheus/bulkhead-alerts.yml usr/share/doc/bulkhead/docs/grafana/bulkhead.json
has "$lib" "usr/lib/libbulkhead.so.$major" "usr/lib/libbulkhead.so.$version"
has "$dev" usr/lib/libbulkhead.so usr/lib/libbulkhead.a usr/include/bulkhead/bulkhead.h \
  usr/include/bulkhead/client.hpp usr/lib/cmake/bulkhead/bulkheadConfig.cmake \
  usr/lib/cmake/bulkhead/bulkheadConfigVersion.cmake usr/lib/cmake/bulkhead/bulkheadTargets.cmake \
  usr/lib/pkgconfig/bulkhead.pc
# Each file in one package only: dpkg refuses to install two packages that
# share one.
shared=$(cat <(files "$daemon") <(files "$lib") <(files "$dev") <(files "$python") | sort | uniq -d)
[ -z "$shared" ] || fail "files in more than one package: $shared"
if files "$daemon" | grep -E 'libbulkhead|/include/'; then fail "the daemon's package holds library files"; fi
if files "$lib" | grep -vE "^\./usr/lib/libbulkhead\.so\.$major(\..*)?$"; then
  fail "libbulkhead$major holds more than the shared library"
fi
module=usr/lib/python3/dist-packages/bulkhead/__init__.py
[ "$(files "$python")" = "./$module" ] || fail "python3-bulkhead holds more or less than /$module: $(files "$python")"
owners=$(for deb in "$daemon" "$lib" "$dev" "$python"; do dpkg-deb -c "$deb"; done | awk '{ print $2 }' | sort -u)
[ "$owners" = root/root ] || fail "files not owned by root/root: $(tr '\n' ' ' <<<"$owners")"

echo "== control"
for deb in "$daemon" "$lib" "$dev" "$python"; do
  echo "-- $(basename "$deb")"
  dpkg-deb -f "$deb" Package Version Architecture Depends Section
done
[ "$(field "$daemon" Package)" = bulkhead ] || fail "the daemon's package is not named bulkhead"
# Description: a synopsis of each package's own (dpkg -l and apt search show
# it alone), then lines that begin with exactly one space (two make a
# verbatim line, which apt show prints unwrapped).
# sed reads to the end where head would stop early: under pipefail, dpkg-deb
# killed by SIGPIPE while still writing would end the script here, silently.
synopses=$(for deb in "$daemon" "$lib" "$dev" "$python"; do field "$deb" Description | sed -n 1p; done)
[ "$(sort -u <<<"$synopses" | wc -l)" = 4 ] || fail "the packages share a synopsis:
$synopses"
for deb in "$daemon" "$lib" "$dev" "$python"; do
  if field "$deb" Description | tail -n +2 | grep -v '^ [^ ]'; then
    fail "$(basename "$deb"): lines of its Description above do not begin with exactly one space"
  fi
done
[ "$(field "$dev" Depends)" = "libbulkhead$major (= $version)" ] ||
  fail "bulkhead-dev depends on '$(field "$dev" Depends)'"
[ "$(field "$python" Architecture)" = all ] || fail "python3-bulkhead is not Architecture: all"
[ "$(field "$python" Depends)" = "python3, libbulkhead$major (>= $version)" ] ||
  fail "python3-bulkhead depends on '$(field "$python" Depends)'"
# dpkg-shlibdeps computed these from the ELF files: the C library, C++, and
# the daemon's own libraries.
# (Read whole first: grep -q at the end of a pipe may SIGPIPE its writer.)
daemon_depends=$(field "$daemon" Depends)
lib_depends=$(field "$lib" Depends)
for want in libc6 libstdc++6 libsystemd0 libspdlog libtomlplusplus libprometheus-cpp; do
  grep -q "$want" <<<"$daemon_depends" || fail "bulkhead does not depend on $want: $daemon_depends"
done
for want in libc6 libstdc++6; do
  grep -q "$want" <<<"$lib_depends" || fail "libbulkhead$major does not depend on $want"
done
mkdir -p "$work/control"
dpkg-deb -e "$daemon" "$work/control/daemon"
dpkg-deb -e "$lib" "$work/control/lib"
dpkg-deb -e "$python" "$work/control/python"
[ "$(cat "$work/control/daemon/conffiles")" = /etc/bulkhead/bulkhead.toml ] ||
  fail "conffiles is not exactly /etc/bulkhead/bulkhead.toml: $(cat "$work/control/daemon/conffiles" 2>&1)"
grep -q "systemd-sysusers bulkhead.conf" "$work/control/daemon/postinst" ||
  fail "postinst does not create the user and group"
for script in daemon/postinst daemon/prerm daemon/postrm python/postinst python/prerm; do
  [ -x "$work/control/$script" ] || fail "$script is not executable"
  sh -n "$work/control/$script" || fail "$script is not valid sh"
done
# What the scripts ask of systemd, on a host that runs it, and of Python's
# byte-compiler: each runs in a mount namespace (unshare -rm: no root needed
# where user namespaces are allowed) with /run/systemd/system present and
# systemctl, systemd-sysusers, py3compile and py3clean replaced by stubs
# that log their arguments.
stubs=$work/stubs
mkdir -p "$stubs"
for tool in systemctl systemd-sysusers py3compile py3clean; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n' "$tool" "$work" >"$stubs/$tool"
  chmod +x "$stubs/$tool"
done
# calls PACKAGE/SCRIPT ARGS...: what the script called, one line each,
# ";"-joined.
# With SYSTEMD=offline, /run/systemd/system is absent: systemd does not
# run there (a container, an image being built).
calls() {
  rm -f "$work/calls"
  local running='mkdir -p /run/systemd/system &&'
  [ "${SYSTEMD:-}" = offline ] && running=
  unshare -rm /bin/sh -c "mount -t tmpfs none /run && $running"' exec "$@"' sh \
    env PATH="$stubs:$PATH" "$work/control/$@" >/dev/null ||
    fail "$* failed (or unshare -rm is not allowed here)"
  [ -f "$work/calls" ] && paste -sd';' "$work/calls" || true
}
expect_calls() {
  local want=$1 got
  shift
  got=$(calls "$@")
  [ "$got" = "$want" ] || fail "$*: called '$got', not '$want'"
}
# Neither an install nor an upgrade starts, stops or restarts the daemon
# (the operator enables it, and restarts it onto a new binary when
# convenient); removal stops and disables it.
expect_calls "systemd-sysusers bulkhead.conf;systemctl daemon-reload" daemon/postinst configure
expect_calls "systemd-sysusers bulkhead.conf;systemctl daemon-reload" daemon/postinst configure 0.1.0
expect_calls "systemctl disable --now bulkheadd.service" daemon/prerm remove
expect_calls "" daemon/prerm upgrade 0.2.0
expect_calls "systemctl daemon-reload" daemon/postrm remove
# Where systemd does not run, nothing is started, stopped or reloaded, but
# removal still disables the unit: the links an earlier enable made would
# point at a unit that is gone.
SYSTEMD=offline expect_calls "systemd-sysusers bulkhead.conf" daemon/postinst configure
SYSTEMD=offline expect_calls "systemctl disable bulkheadd.service" daemon/prerm remove
SYSTEMD=offline expect_calls "" daemon/prerm upgrade 0.2.0
SYSTEMD=offline expect_calls "" daemon/postrm remove
# python3-bulkhead compiles its module when configured and cleans it before
# removal or an upgrade (the new version compiles its own).
expect_calls "py3compile -p python3-bulkhead" python/postinst configure
expect_calls "py3clean -p python3-bulkhead" python/prerm remove
expect_calls "py3clean -p python3-bulkhead" python/prerm upgrade 0.2.0
# Where there is no systemd-sysusers, postinst says what to create instead.
mkdir -p "$work/no-sysusers"
cp "$stubs/systemctl" "$work/no-sysusers/"
said=$(PATH="$work/no-sysusers" "$work/control/daemon/postinst" configure 2>&1 >/dev/null) ||
  fail "postinst configure failed without systemd-sysusers"
grep -q "systemd-sysusers not found: create the user and group bulkhead" <<<"$said" ||
  fail "postinst without systemd-sysusers said '$said'"
[ "$(cat "$work/control/lib/shlibs" 2>&1)" = "libbulkhead $major libbulkhead$major (>= $version)" ] ||
  fail "libbulkhead$major's shlibs is not 'libbulkhead $major libbulkhead$major (>= $version)': $(cat "$work/control/lib/shlibs" 2>&1)"
grep -q ldconfig "$work/control/lib/postinst" || fail "libbulkhead$major's postinst does not run ldconfig"

echo "== unpacked into a scratch root"
root=$work/root
for deb in "$daemon" "$lib" "$dev" "$python"; do dpkg-deb -x "$deb" "$root"; done
# The packaged docs link to no repository file outside them (install_test.sh
# checks every link of a plain install; this, that cpack ran the same rule).
grep -q '^default, which is `daemon/default_config.toml`$' "$root/usr/share/doc/bulkhead/docs/config.md" ||
  fail "the packaged docs/config.md still links to ../daemon/default_config.toml, which it does not hold"
cmp -s "$src/daemon/default_config.toml" "$root/etc/bulkhead/bulkhead.toml" ||
  fail "/etc/bulkhead/bulkhead.toml is not daemon/default_config.toml"
cmp -s "$src/systemd/bulkheadd.service" "$root/lib/systemd/system/bulkheadd.service" ||
  fail "the unit is not systemd/bulkheadd.service"
cmp -s "$src/systemd/bulkhead.sysusers" "$root/usr/lib/sysusers.d/bulkhead.conf" ||
  fail "the sysusers file is not systemd/bulkhead.sysusers"
unit=$root/lib/systemd/system/bulkheadd.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
binary=${exec_start%% *}
[ -x "$root$binary" ] || fail "the unit's ExecStart=$binary is not an executable in the package"
config=$(sed -n 's/.*--config \([^ ]*\).*/\1/p' <<<"$exec_start")
[ -f "$root$config" ] || fail "the unit's --config $config is not in the package"
doc=$(sed -n 's#^Documentation=file://##p' "$unit")
[ -f "$root$doc" ] || fail "the unit's Documentation=$doc is not in the package"
sysusers_user=$(awk '$1 == "u" { print $2 }' "$root/usr/lib/sysusers.d/bulkhead.conf")
grep -qx "User=$sysusers_user" "$unit" || fail "the unit's User= is not the sysusers file's user $sysusers_user"
"$root$binary" --check-config "$root$config" || fail "the packaged bulkheadd refuses the packaged config"
bash "$src/tests/packaging/check_man_pages.sh" "$version" "$root/usr/share/man/man8/bulkheadd.8.gz" \
  "$root/usr/bin/bulkheadd" "$root/usr/share/man/man1/bulkheadctl.1.gz" "$root/usr/bin/bulkheadctl" ||
  fail "the packaged man pages do not document the packaged programs"
grep -q "Library soname: \[libbulkhead.so.$major\]" <<<"$(readelf -d "$root/usr/lib/libbulkhead.so.$version")" ||
  fail "the packaged library has no soname libbulkhead.so.$major"
[ "$(readlink "$root/usr/lib/libbulkhead.so")" = "libbulkhead.so.$major" ] ||
  fail "libbulkhead.so does not point at libbulkhead.so.$major"
cmp -s "$src/bindings/python/bulkhead/__init__.py" "$root/$module" ||
  fail "the packaged module is not bindings/python/bulkhead/__init__.py"
# The binding's own tests, on the packaged module and the packaged library.
echo "== the binding's tests on python3-bulkhead and libbulkhead$major"
packages=$root/usr/lib/python3/dist-packages
loaded=$(env "$@" PYTHONPATH="$packages" "$python3" -c 'import bulkhead; print(bulkhead.__file__)') ||
  fail "python3 cannot import the packaged module"
[ "$loaded" = "$root/$module" ] || fail "python3 imported bulkhead from $loaded, not from the package"
env "$@" PYTHONPATH="$packages" BULKHEAD_LIBRARY="$root/usr/lib/libbulkhead.so.$major" PYTHONDONTWRITEBYTECODE=1 \
  "$python3" -m unittest discover -s "$src/tests/bindings" -p "test_*.py" >"$work/python.log" 2>&1 ||
  { cat "$work/python.log"; fail "the binding's tests fail on the packaged module"; }
tail -n 3 "$work/python.log"
echo "ok: bulkhead, libbulkhead$major, bulkhead-dev and python3-bulkhead $version hold what they should"
