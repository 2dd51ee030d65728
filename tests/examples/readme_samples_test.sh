#!/usr/bin/env bash
# ctest `readme_samples`: every C and C++ sample of README.md compiles as
# shown, each inside a function, against the public headers, with stubs for
# the program's own functions (call_payments(), ...) and `{ ... }` read as
# an empty block: C as C99, C++ as C++20 (the Executor sample's designated
# initializers; install_consumer holds the headers to C++17), under -Wall
# -Wextra -Wpedantic -Werror but for unused variables, which a fragment
# leaves.
# usage: readme_samples_test.sh SOURCE_DIR C_COMPILER CXX_COMPILER
set -euo pipefail
src=$1
cc=$2
cxx=$3
fail() { echo "readme_samples_test: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/bh-readme-samples.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Each ```c and ```cpp block of README.md into work/N.c or work/N.cpp.
awk -v dir="$work" '
  /^```(c|cpp)$/ { n++; lang = substr($0, 4); file = dir "/" n "." lang; inside = 1; next }
  /^```/ && inside { inside = 0; close(file); next }
  inside { gsub(/\{ \.\.\. \}/, "{ }"); print > file }
' "$src/README.md"
ls "$work"/*.c >/dev/null 2>&1 || fail "README.md has no C sample"
ls "$work"/*.cpp >/dev/null 2>&1 || fail "README.md has no C++ sample"

c_prelude='#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <bulkhead/bulkhead.h>
int call_payments(void);
void serve_fallback(void);
void call_payments_with_timeout_ns(uint64_t ns);
extern bh_dep *payments;
int sample(void);
int sample(void) {'
cxx_prelude='#include <bulkhead/client.hpp>
#include <bulkhead/executor.hpp>
#include <bulkhead/fallback.hpp>
#include <chrono>
struct Reply { bool ok() const; };
Reply call_payments();
Reply call_payments(std::chrono::nanoseconds budget);
Reply call_payments(int request);
Reply cached_reply(int request);
Reply legacy_blocking_call();
void serve_fallback();
int shed(int reason);
struct Metrics { void count(const char* what); };
extern Metrics metrics;
extern bulkhead::Client client;
extern bulkhead::Dependency payments;
extern int request;
int sample();
int sample() {'
flags=(-Wall -Wextra -Wpedantic -Werror -Wno-unused-variable -Wno-unused-but-set-variable
       -I "$src/client/include" -fsyntax-only)
for sample in "$work"/*.c "$work"/*.cpp; do
  case "$sample" in
    *.cpp) prelude=$cxx_prelude compile=("$cxx" -std=c++20 -x c++) ;;
    *) prelude=$c_prelude compile=("$cc" -std=c99 -x c) ;;
  esac
  printf '%s\n%s\nreturn 0;\n}\n' "$prelude" "$(cat "$sample")" >"$sample.whole"
  if ! "${compile[@]}" "${flags[@]}" "$sample.whole" 2>"$sample.log"; then
    echo "--- README.md sample:"; cat "$sample"; echo "--- compiler:"; cat "$sample.log"
    fail "a README.md sample does not compile"
  fi
done
echo "ok: $(ls "$work"/*.c "$work"/*.cpp | wc -l) README.md samples compile"
