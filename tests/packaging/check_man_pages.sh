#!/usr/bin/env bash
# The man pages of bulkheadd and bulkheadctl render without a warning, give
# whatis a NAME line, come from this version's programs and document each
# program: every option its --help lists, bulkheadctl's subcommands with
# their own options, and the other page. Run as a ctest on the build's
# pages (man_pages) and by install_test.sh and deb_test.sh on the installed
# and packaged ones.
# usage: check_man_pages.sh VERSION BULKHEADD_PAGE BULKHEADD BULKHEADCTL_PAGE BULKHEADCTL
#   a PAGE is PROGRAM.SECTION.gz; each PROGRAM is the binary its page is
#   checked against.
set -euo pipefail
version=$1
daemon_page=$2
daemon=$3
ctl_page=$4
ctl=$5
fail() { echo "check_man_pages: $*" >&2; exit 1; }
for tool in man lexgrog; do
  command -v "$tool" >/dev/null ||
    fail "$tool not found: install Debian's man-db package (scripts/install-deps.sh does)"
done
# MAN_DISABLE_SECCOMP: man-db's sandbox fails under some container runtimes.
export LC_ALL=C.UTF-8 MANWIDTH=80 MANPAGER=cat MAN_DISABLE_SECCOMP=1

# render PAGE: the page as `man -l` shows it; any groff warning fails.
render() {
  local err
  err=$(man --warnings -l "$1" 2>&1 >"$work/text") || fail "man -l $1 failed: $err"
  [ -z "$err" ] || fail "man -l $1 warns: $err"
  cat "$work/text"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# check PAGE PROGRAM SECTION WORD...: the checks for one page; each WORD
# must be in its text.
check() {
  local page=$1 program=$2 section=$3 name text
  shift 3
  name=$(basename "$program")
  [ "$(basename "$page")" = "$name.$section.gz" ] || fail "$page is not $name.$section.gz"
  # gzip -9n: no file name and no time in the header (flags and mtime 0),
  # so that a build makes the same bytes every time.
  [ "$(od -An -tu1 -j3 -N5 "$page" | tr -s ' ')" = " 0 0 0 0 0" ] ||
    fail "$page has a file name or a time in its gzip header: not made by gzip -n"
  # Each option's names bold, short and long (options.sed).
  ! zcat "$page" | grep -F '\fR,\-' >/dev/null ||
    fail "$page has an option name half bold: $(zcat "$page" | grep -F '\fR,\-' | head -n1)"
  text=$(render "$page")
  echo "-- $page: $(sed -n 1p <<<"$text")"
  grep -q "^${name^^}($section) " <<<"$text" || fail "$page's header is not ${name^^}($section)"
  grep -qE "^$name $version +" < <(tail -n1 <<<"$text") ||
    fail "$page's footer does not name $name $version (a page of another version?): $(tail -n1 <<<"$text")"
  # What lintian asks of the NAME section: whatis can parse it.
  grep -q "\"$name - " <<<"$(lexgrog "$page")" || fail "whatis cannot parse $page's NAME: $(lexgrog "$page" 2>&1)"
  for heading in NAME SYNOPSIS DESCRIPTION OPTIONS "SEE ALSO"; do
    grep -qx "$heading" <<<"$text" || fail "$page has no $heading section"
  done
  # Every option the program's --help lists, so the page is not stale.
  local options
  options=$("$program" --help | grep -oE '(^|[ ,])--[a-z][a-z-]*' | sed 's/^[ ,]//' | sort -u)
  [ -n "$options" ] || fail "$program --help lists no options"
  for word in $options "$@"; do
    grep -qF -- "$word" <<<"$text" || fail "$page does not mention $word"
  done
}

check "$daemon_page" "$daemon" 8 --config --check-config --segment --metrics-listen --recreate-segment \
  SIGHUP /etc/bulkhead/bulkhead.toml "bulkheadctl(1)"
check "$ctl_page" "$ctl" 1 --segment BULKHEAD_SEGMENT "bulkheadd(8)"
# Each subcommand as an entry of the list: the word starting a line of the
# text, alone or before its description.
ctl_text=$(render "$ctl_page")
for sub in status top get processes breaker pin; do
  grep -qE "^ +$sub( |$)" <<<"$ctl_text" || fail "$ctl_page does not list the subcommand $sub"
  # ... and has its own options, in its own --help's words.
  grep -qE "^ +Usage: bulkheadctl $sub " <<<"$ctl_text" || fail "$ctl_page has no usage of $sub"
  # Taken first: a --help that failed inside the for's list would pass.
  sub_options=$("$ctl" "$sub" --help | grep -oE '(^|[ ,])--[a-z][a-z-]*' | sed 's/^[ ,]//' | sort -u)
  [ -n "$sub_options" ] || fail "bulkheadctl $sub --help lists no options"
  for option in $sub_options; do
    grep -qF -- "$option" <<<"$ctl_text" || fail "$ctl_page does not mention $sub's $option"
  done
done
echo "ok: $(basename "$daemon_page") and $(basename "$ctl_page") render and document their programs"
