#!/usr/bin/env bash
# `cmake --install` into a scratch prefix inside the build directory, then
# examples/consumer built against that install alone, with CMake
# (find_package(bulkhead CONFIG REQUIRED)) and with pkg-config, and run in
# standalone mode (no daemon). A ctest.
# usage: install_test.sh SOURCE_DIR BUILD_DIR [COMPILER_FLAG...]
#   COMPILER_FLAGs (the build's -fsanitize=...) go to the consumer's compiles
#   and links too: a sanitized libbulkhead needs its runtime in the program.
set -euo pipefail
src=$1
build=$2
shift 2
flags="$*"
fail() { echo "install_test: $*" >&2; exit 1; }

work=$build/install-test
rm -rf "$work"
prefix=$work/prefix
mkdir -p "$work"

echo "== cmake --install --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install failed"; }
# Nothing may land outside the prefix (the system files go to /etc and /lib
# only under the prefix /usr).
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt" || true)
[ -z "$outside" ] || fail "installed outside $prefix:
$outside"

libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
mandir=$(sed -n 's/^CMAKE_INSTALL_MANDIR:PATH=//p' "$build/CMakeCache.txt")
mandir=${mandir:-share/man}  # GNUInstallDirs leaves the entry empty for its default, DATAROOTDIR/man
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
major=${version%%.*}
for f in bin/bulkheadd bin/bulkheadctl "$mandir/man8/bulkheadd.8.gz" "$mandir/man1/bulkheadctl.1.gz" \
    "$libdir/libbulkhead.so.$version" "$libdir/libbulkhead.so.$major" \
    "$libdir/libbulkhead.so" "$libdir/libbulkhead.a" include/bulkhead/bulkhead.h \
    include/bulkhead/client.hpp "$libdir/cmake/bulkhead/bulkheadConfig.cmake" \
    "$libdir/cmake/bulkhead/bulkheadConfigVersion.cmake" "$libdir/pkgconfig/bulkhead.pc" \
    lib/systemd/system/bulkheadd.service lib/sysusers.d/bulkhead.conf etc/bulkhead/bulkhead.toml \
    share/doc/bulkhead/README.md share/doc/bulkhead/docs/operations.md lib/python3/dist-packages/bulkhead/__init__.py \
    share/doc/bulkhead/docs/prometheus/bulkhead-alerts.yml share/doc/bulkhead/docs/grafana/bulkhead.json; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# Every relative link of the installed README and docs/ resolves where they
# are installed: the ones into docs/ beside README, and none to a repository
# file the install leaves out (those become their text, and nothing else
# changes: with every link read as its text, each file is its source).
docdir=$prefix/share/doc/bulkhead
as_text() { sed -E 's/\[([^];]*)\]\([^);[:space:]]+\)/\1/g' "$1"; }
for doc in README.md $(cd "$src" && echo docs/*.md); do
  [ -e "$docdir/$doc" ] || fail "not installed: share/doc/bulkhead/$doc"
  cmp -s <(as_text "$src/$doc") <(as_text "$docdir/$doc") || fail "$doc changed in more than its links when installed"
  for link in $(grep -oE '\]\([^);[:space:]]+\)' "$docdir/$doc" | sed -E 's/^\]\(//; s/[#)].*$//' | sort -u); do
    case "$link" in "" | *:*) continue ;; esac
    [ -e "$(dirname "$docdir/$doc")/$link" ] || fail "the installed $doc links to $link, which is not installed"
  done
done
grep -qF '[`docs/operations.md`](docs/operations.md)' "$docdir/README.md" ||
  fail "the installed README lost its link to docs/operations.md"
[ -x "$prefix/bin/bulkheadd" ] || fail "bin/bulkheadd is not executable"
cmp -s "$src/daemon/default_config.toml" "$prefix/etc/bulkhead/bulkhead.toml" ||
  fail "etc/bulkhead/bulkhead.toml is not daemon/default_config.toml"
grep -q "Library soname: \[libbulkhead.so.$major\]" <<<"$(readelf -d "$prefix/$libdir/libbulkhead.so.$version")" ||
  fail "the installed libbulkhead has no soname libbulkhead.so.$major"
# The installed daemon accepts the installed config.
"$prefix/bin/bulkheadd" --check-config "$prefix/etc/bulkhead/bulkhead.toml" ||
  fail "bulkheadd --check-config refuses the installed config"
bash "$src/tests/packaging/check_man_pages.sh" "$version" "$prefix/$mandir/man8/bulkheadd.8.gz" \
  "$prefix/bin/bulkheadd" "$prefix/$mandir/man1/bulkheadctl.1.gz" "$prefix/bin/bulkheadctl" ||
  fail "the installed man pages do not document the installed programs"

# Each consumer must resolve libbulkhead to the scratch install, not to the
# build tree or the system.
check_uses_install() {  # program
  local resolved
  resolved=$(ldd "$1" | awk '/libbulkhead\.so/ { print $3 }')
  case "$resolved" in
    "$prefix"/*) ;;
    *) fail "$1 loads libbulkhead from '$resolved', not from $prefix" ;;
  esac
}
run() {  # program
  local out
  out=$("$@") || fail "$* failed: $out"
  echo "$out"
  grep -q ": ok$" <<<"$out" || fail "$* did not say ok"
}

echo "== examples/consumer with CMake: find_package(bulkhead CONFIG REQUIRED)"
cmake -S "$src/examples/consumer" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$work/cmake-configure.log" ||
  { cat "$work/cmake-configure.log"; fail "configuring examples/consumer failed"; }
found=$(sed -n 's/^bulkhead_DIR:PATH=//p' "$work/cmake/CMakeCache.txt")
[ "$found" = "$prefix/$libdir/cmake/bulkhead" ] || fail "find_package found bulkhead in '$found'"
cmake --build "$work/cmake" -j 1 >"$work/cmake-build.log" ||
  { cat "$work/cmake-build.log"; fail "building examples/consumer failed"; }
for p in consumer-c consumer-cxx; do
  check_uses_install "$work/cmake/$p"
  run "$work/cmake/$p"
done
if ldd "$work/cmake/consumer-cxx-static" | grep -q libbulkhead; then
  fail "consumer-cxx-static loads libbulkhead.so: it should have linked libbulkhead.a"
fi
run "$work/cmake/consumer-cxx-static"

# build_project NAME WHY-IT-FAILED CMAKELISTS-LINES...: a CMake project in
# $work/NAME made of those lines, configured against the install with the
# flags above and built; fails with its log and WHY-IT-FAILED.
build_project() {
  local name=$1 why=$2
  shift 2
  mkdir -p "$work/$name"
  printf '%s\n' "cmake_minimum_required(VERSION 3.16)" "$@" >"$work/$name/CMakeLists.txt"
  cmake -S "$work/$name" -B "$work/$name/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$work/$name.log" &&
    cmake --build "$work/$name/build" -j 1 >>"$work/$name.log" ||
    { cat "$work/$name.log"; fail "$why"; }
}

echo "== a C-only CMake project linked with bulkhead::client_static"
# Its link is the C compiler's, which adds no C++ runtime of its own.
build_project c-only "a C-only project cannot link bulkhead::client_static" \
  "project(bulkhead-c-only LANGUAGES C)" "find_package(bulkhead CONFIG REQUIRED)" \
  "add_executable(consumer-c-static \"$src/examples/consumer/consumer.c\")" \
  "target_link_libraries(consumer-c-static PRIVATE bulkhead::client_static)"
if ldd "$work/c-only/build/consumer-c-static" | grep -q libbulkhead; then
  fail "consumer-c-static loads libbulkhead.so: it should have linked libbulkhead.a"
fi
run "$work/c-only/build/consumer-c-static"

echo "== a C++14 CMake project: bulkhead::client raises it to the C++17 the headers need"
build_project cxx14 "a C++14 project cannot build with bulkhead::client's headers" \
  "project(bulkhead-cxx14 LANGUAGES CXX)" "set(CMAKE_CXX_STANDARD 14)" "set(CMAKE_CXX_EXTENSIONS OFF)" \
  "find_package(bulkhead CONFIG REQUIRED)" "add_executable(consumer-cxx14 \"$src/examples/consumer/consumer.cpp\")" \
  "target_link_libraries(consumer-cxx14 PRIVATE bulkhead::client)"
check_uses_install "$work/cxx14/build/consumer-cxx14"
run "$work/cxx14/build/consumer-cxx14"

echo "== examples/consumer with pkg-config"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
[ "$(pkg-config --modversion bulkhead)" = "$version" ] || fail "pkg-config --modversion bulkhead is not $version"
pc_libdir=$(realpath "$(pkg-config --variable=libdir bulkhead)")
[ "$pc_libdir" = "$(realpath "$prefix/$libdir")" ] || fail "bulkhead.pc says libdir $pc_libdir"
mkdir -p "$work/pkg-config"
# The public headers compile clean under the warnings a strict project turns on.
strict="-Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror"
# shellcheck disable=SC2046,SC2086  # pkg-config's flags are words
cc -std=c99 $strict $flags "$src/examples/consumer/consumer.c" -o "$work/pkg-config/consumer-c" \
  $(pkg-config --cflags --libs bulkhead)
# shellcheck disable=SC2046,SC2086
c++ -std=c++17 $strict $flags "$src/examples/consumer/consumer.cpp" -o "$work/pkg-config/consumer-cxx" \
  $(pkg-config --cflags --libs bulkhead)
for p in consumer-c consumer-cxx; do
  LD_LIBRARY_PATH=$pc_libdir check_uses_install "$work/pkg-config/$p"
  LD_LIBRARY_PATH=$pc_libdir run "$work/pkg-config/$p"
done
echo "ok: installed into $prefix; consumers built with CMake and pkg-config ran"
