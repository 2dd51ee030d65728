#!/usr/bin/env bash
# Writes help2man material for PROGRAM's subcommands: a SUBCOMMANDS section
# with each one's own --help (its usage, arguments and options), which the
# top-level --help that help2man reads only names. Made at build time from
# the built program, as the rest of the page, so it cannot drift either.
# usage: subcommands.sh PROGRAM OUTPUT
set -euo pipefail
program=$1
output=$2
name=$(basename "$program")
# The names under "Subcommands:" in the top-level --help, up to the blank line.
subcommands=$("$program" --help | sed -n '/^Subcommands:$/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
[ -n "$subcommands" ] || { echo "subcommands.sh: $program --help lists no subcommands" >&2; exit 1; }
{
  echo "[SUBCOMMANDS]"
  for sub in $subcommands; do
    echo ".SS $sub"
    echo ".nf"
    # The help as printed, less the exit-status footer every subcommand
    # repeats (the page has it once); backslashes and a leading . or '
    # escaped for roff.
    "$program" "$sub" --help |
      sed -e "s|^Usage: .*$name |Usage: $name |" -e '/^Exit status/,$d' -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
    echo ".fi"
  done
} >"$output"
