#!/usr/bin/env python3
"""Runs the simulator's suite over several seeds and compares one policy with
the references: the reference policy with the most goodput, and the best
static limit. A single run moves by a few tenths of a point with its seed,
and a rare seed can show a collapse the others do not; this is the check to
make before claiming a policy change helps.

  scripts/sim-seeds.py [--policy balance] [--seeds 0,100,...,500] [--scenario NAME]... [KEY=VALUE...]

KEY=VALUE pairs are the policy's parameters (docs/config.md), given to every
run as bulkhead-sim's --param POLICY.KEY=VALUE. Per scenario, over the seeds
(each an offset added to the scenario's own seed), it prints the policy's mean
goodput (% of capacity), mean p50 of admitted calls (ms: a queue bought for
goodput shows there first) and p99 over no-load p99, its mean and its worst
with the seed offset it came at (one seed's runaway queue hardly moves a mean
of many); then its goodput minus
the best reference's, as the mean and the worst seed, and how many seeds also
had a worse p99 than that reference; then the same against the best static
limit; then on how many seeds a reference beat it on both counts (more goodput
and a p99 no worse), and which. The reference with the most goodput may buy it
with a deep queue (AIMD's p99 is several times the others'); one that beats
the policy on both is a loss with no excuse. The last line sums, over
scenarios, the mean shortfall (seeds where the policy did better count as 0),
and counts the scenarios where a reference beat it on both. --scenario (the
file name without .toml, repeated for several) runs those only: a quick look
at the scenarios a change is for, before the whole suite.

--tail SECONDS prints instead, per scenario and seed, what the policy is left
with after a change late in the run: its baseline at the end (baseline_ms of
the last tick) and the mean p50 of admitted calls over the ticks after
SECONDS (p50_ms), both from the run's --out CSV.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCES = ['aimd', 'gradient', 'gradient2', 'vegas']


def run(sim, scenario, offset, policy, params, policies, out=None):
    text = open(scenario).read()
    text = re.sub(r'^seed = (\d+)', lambda m: f'seed = {int(m.group(1)) + offset}', text, flags=re.M)
    with tempfile.NamedTemporaryFile('w', suffix='.toml') as f:
        f.write(text)
        f.flush()
        args = [sim, 'run', f.name, '--json', '--jobs', '2']
        if out:
            args += ['--out', out, '--no-plot']
        for p in policies:
            args += ['--policy', p]
        for k, v in params.items():
            args += ['--param', f'{policy}.{k}={v}']
        out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr)
    return json.loads(out.stdout)['scenarios'][0]['runs']


def tail(sim, scenarios, offsets, policy, params, after):
    print(f'{policy}: baseline at the end, and mean p50 after {after:g} s (ms)')
    for scenario in scenarios:
        name = os.path.basename(scenario)[:-5]
        for offset in offsets:
            with tempfile.TemporaryDirectory() as out:
                run(sim, scenario, offset, policy, params, [policy], out)
                with open(os.path.join(out, f'{name}.csv')) as f:
                    rows = [r for r in csv.DictReader(f) if r['policy'] == policy]
            late = [float(r['p50_ms']) for r in rows if float(r['t_s']) > after]
            p50 = f'{sum(late) / len(late):8.1f}' if late else '       -'
            print(f'{name:27s}{offset:>6d}{float(rows[-1]["baseline_ms"]):8.1f}{p50}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--policy', default='balance')
    ap.add_argument('--seeds', default='0,100,200,300,400,500', help='offsets added to each scenario\'s seed')
    ap.add_argument('--sim', default=os.path.join(ROOT, 'build/tools/sim/bulkhead-sim'))
    ap.add_argument('--scenario', action='append', default=[], metavar='NAME',
                    help='run this scenario only (scenarios/NAME.toml); repeat for several')
    ap.add_argument('--tail', type=float, metavar='SECONDS',
                    help='print per seed the baseline at the end and the mean p50 after SECONDS instead')
    ap.add_argument('params', nargs='*', metavar='KEY=VALUE')
    a = ap.parse_args()
    bad = [p for p in a.params if '=' not in p or p.startswith('=')]
    if bad:
        ap.error(f'not KEY=VALUE: {" ".join(bad)}')
    params = dict(p.split('=', 1) for p in a.params)
    try:
        offsets = [int(s) for s in a.seeds.split(',')]
    except ValueError:
        ap.error(f'--seeds {a.seeds}: not a comma-separated list of integers')
    scenarios = sorted(os.path.join(ROOT, 'scenarios', f) for f in os.listdir(os.path.join(ROOT, 'scenarios'))
                       if f.endswith('.toml'))
    if a.scenario:
        chosen = [os.path.join(ROOT, 'scenarios', f'{name}.toml') for name in a.scenario]
        missing = [c for c in chosen if c not in scenarios]
        if missing:
            sys.exit(f'sim-seeds: no such scenario: {", ".join(os.path.relpath(m, ROOT) for m in missing)}')
        scenarios = sorted(set(chosen))
    if a.tail is not None:
        return tail(a.sim, scenarios, offsets, a.policy, params, a.tail)
    print(f'{len(offsets)} seeds; goodput in points of capacity')
    print(f'{"":27s}{"%cap":>6s}{"p50 ms":>8s}{"p99/nl":^22s} | {"vs best reference":^24s} | {"vs best static":^14s}'
          f' | beaten on both')
    print(f'{"":27s}{"mean":>6s}{"mean":>8s}{"mean":>8s}{"worst":>7s}{"at":>7s} | {"mean":>6s}{"worst":>7s}{"p99 worse":>11s}'
          f' | {"mean":>7s}{"worst":>7s} | seeds   by')
    short_ref = short_static = 0.0
    beaten_scenarios = 0
    for scenario in scenarios:
        pct, p50, p99, gaps, sgaps, worse, beaten, beaters = [], [], [], [], [], 0, 0, set()
        for offset in offsets:
            refs = run(a.sim, scenario, offset, a.policy, {}, REFERENCES)
            mine = run(a.sim, scenario, offset, a.policy, params, [a.policy])
            me = next(r for r in mine if r['policy'] == a.policy)
            others = [r for r in refs if r['policy'] in REFERENCES and r['policy'] != a.policy]
            best = max(others, key=lambda r: r['goodput_pct'])
            static = next(r for r in refs if r['kind'] == 'static-best')
            pct.append(me['goodput_pct'])
            p50.append(me['p50_ms'])
            p99.append(me['p99_vs_noload'])
            gaps.append(me['goodput_pct'] - best['goodput_pct'])
            sgaps.append(me['goodput_pct'] - static['goodput_pct'])
            worse += me['p99_vs_noload'] > best['p99_vs_noload']
            better = [r['policy'] for r in others
                      if r['goodput_pct'] > me['goodput_pct'] and r['p99_vs_noload'] <= me['p99_vs_noload']]
            beaten += bool(better)
            beaters.update(better)
        n = len(offsets)
        short_ref += sum(min(g, 0) for g in gaps) / n
        short_static += sum(min(g, 0) for g in sgaps) / n
        top = max(range(n), key=lambda i: p99[i])
        print(f'{os.path.basename(scenario)[:-5]:27s}{sum(pct) / n:6.1f}{sum(p50) / n:8.1f}{sum(p99) / n:8.2f}'
              f'{p99[top]:7.2f}{"+" + str(offsets[top]):>7s} | '
              f'{sum(gaps) / n:+6.1f}{min(gaps):+7.1f}{worse:>6d} of {n} | '
              f'{sum(sgaps) / n:+7.1f}{min(sgaps):+7.1f} | '
              f'{beaten:>2d} of {n} {",".join(sorted(beaters))}'.rstrip())
        beaten_scenarios += beaten > 0
    print(f'mean shortfall summed over scenarios: {short_ref:.1f} points vs the best reference, '
          f'{short_static:.1f} vs the best static limit; beaten on both in {beaten_scenarios} of '
          f'{len(scenarios)} scenarios')


main()
