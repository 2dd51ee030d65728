#!/usr/bin/env python3
"""Whether the tests would notice: mutation testing of one source file.

Each mutant is one small edit of FILE: a comparison in an if or while
condition turned into its neighbour (< and <=, > and >=, == and !=), or a
one-line error report (a call of fail(...) or a throw) deleted; or, with
--list, the edits a Python file gives as M = [(old, new), ...], each old
text occurring exactly once in FILE. For each mutant the script rebuilds
the ninja TARGETs in the build directory and runs the TESTs (paths under
it); a mutant is killed when a test fails, and survives when every test
passes. A survivor is a rule no test can fail:
it wants a test, or it is equivalent (no input tells the two apart). A
mutant that does not build counts apart. The TARGETs must build and the
TESTs pass on the unchanged file first, or the script stops before any
mutant. The file is put back as it was however the run ends.

  scripts/mutants.py daemon/config.cpp --target config_test --test tests/daemon/config_test
  scripts/mutants.py tools/sim/model.cpp --list my_mutants.py --target sim_test --test tests/tools/sim_test

It takes one build and test run per mutant, and one on the unchanged file (seconds to a minute each):
a run over a whole file is minutes, so it is a tool to run by hand on the
file a change is about, not part of scripts/test.sh. It uses the build
directory scripts/build.sh made (--build to name another) and leaves it
built from the unchanged file.
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLIPS = [(" <= ", " < "), (" >= ", " > "), (" < ", " <= "), (" > ", " >= "), (" == ", " != "), (" != ", " == ")]


def generated_mutants(src):
    """Operator flips in conditions and deletions of one-line error reports."""
    mutants = []
    lines = src.split("\n")
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("//"):
            continue
        if i > 0 and (re.search(r"\bfail\(", s) or s.startswith("throw ")) and s.endswith(";"):
            old = lines[i - 1] + "\n" + line  # the line before, to make it unique
            mutants.append((old, lines[i - 1]))
        if re.match(r"(\}\s*else if|else if|if|while)\s*\(", s):
            for a, b in FLIPS:
                if a in line:
                    mutants.append((line, line.replace(a, b, 1)))
                    break
    return [(old, new) for old, new in mutants if src.count(old) == 1]


def run_test(binary, timeout):
    """The test's exit status, or -9 when it ran past `timeout` seconds.

    The test runs in a session of its own, ended whole once its leader has
    exited: a child the test forked (a process that dies mid-call, say)
    outlives a parent the mutant made fail or hang, and would hold on to
    whatever the next run needs. The segments a killed test could not
    remove (tests/support/temp_segment.hpp names them by its pid) go too."""
    test = subprocess.Popen([binary], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return test.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return -9
    finally:  # a signal that ends the script ends the test too
        try:
            os.killpg(test.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        test.wait()
        for left in glob.glob(f"/dev/shm/bhtest-*-{test.pid}-*"):
            os.unlink(left)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="the source file to mutate, relative to the repository")
    parser.add_argument("--target", action="append", required=True, help="ninja target to rebuild (repeat)")
    parser.add_argument("--test", action="append", required=True, help="test binary under the build dir (repeat)")
    parser.add_argument("--list", help="a Python file defining M = [(old, new), ...] instead of the generated ones")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default: build)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a test binary may take (default 300)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="ninja's parallel jobs (default: the CPUs)")
    parser.add_argument("--first", type=int, help="run only the mutants numbered under N")
    parser.add_argument("--from", dest="start", type=int, default=0, help="start at mutant #N (default 0)")
    args = parser.parse_args()

    path = os.path.join(ROOT, args.file)
    with open(path) as f:
        original = f.read()
    if args.list:
        scope = {}
        with open(args.list) as f:
            exec(f.read(), scope)
        mutants = scope["M"]
    else:
        mutants = generated_mutants(original)
    numbered = list(enumerate(mutants))[args.start:args.first]

    def build():
        command = ["ninja", "-C", args.build, f"-j{args.jobs}"] + args.target
        return subprocess.run(command, capture_output=True, text=True).returncode == 0

    # An interrupt ends the loop through the finally below, which restores.
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The tests must pass on the unchanged file first: a test that fails
    # anyway (or a target that does not build) would "kill" every mutant.
    if not build():
        sys.exit(f"mutants: {' '.join(args.target)} does not build from the unchanged {args.file}")
    for test in args.test:
        status = run_test(os.path.join(args.build, test), args.timeout)
        if status != 0:
            sys.exit(f"mutants: {test} fails on the unchanged {args.file} (status {status}): no mutant could survive it")
    counts = {"killed": 0, "SURVIVED": 0, "skipped": 0, "does not build": 0}
    try:
        for i, (old, new) in numbered:
            # The line the mutant changes (a deletion keeps the line before it).
            old_lines, new_lines = old.split("\n"), new.split("\n")
            if len(new_lines) < len(old_lines):
                label = f"#{i} {old_lines[-1].strip()[:70]!r} deleted"
            else:
                o, n = next(((o, n) for o, n in zip(old_lines, new_lines) if o != n), (old, new))
                label = f"#{i} {o.strip()[:70]!r} -> {n.strip()[:70]!r}"
            if original.count(old) != 1:
                counts["skipped"] += 1
                print(f"{label}: skipped (the old text occurs {original.count(old)} times)", flush=True)
                continue
            with open(path, "w") as f:
                f.write(original.replace(old, new))
            if not build():
                verdict = "does not build"
            else:
                verdict = "SURVIVED"
                for test in args.test:
                    if run_test(os.path.join(args.build, test), args.timeout) != 0:
                        verdict = "killed"
                        break
            counts[verdict] += 1
            print(f"{label}: {verdict}", flush=True)
    finally:
        with open(path, "w") as f:
            f.write(original)
        build()
    print(f"{len(numbered)} mutants of {args.file}: {counts['killed']} killed, {counts['SURVIVED']} survived, "
          f"{counts['does not build']} did not build, {counts['skipped']} skipped")


if __name__ == "__main__":
    main()
