#!/usr/bin/env python3
"""Runs the simulator's suite over several seeds and compares one policy with
the references: the reference policy with the most goodput, and the best
static limit. A single run moves by a few tenths of a point with its seed;
this is the check to make before claiming a policy change helps.

  scripts/sim-seeds.py [--policy balance] [--seeds 0,100,200] [KEY=VALUE...]

KEY=VALUE pairs are the policy's parameters (docs/config.md), applied to a
copy of each scenario. Per scenario and seed it prints the policy's goodput
(% of capacity) / p99 over no-load p99, then its goodput minus the best
reference's ("!" when its p99 is also worse), and minus the best static
limit's; the last line sums the shortfalls.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCES = ['aimd', 'gradient', 'gradient2', 'vegas']


def run(sim, scenario, offset, policy, params, policies):
    text = open(scenario).read()
    text = re.sub(r'^seed = (\d+)', lambda m: f'seed = {int(m.group(1)) + offset}', text, flags=re.M)
    if params:
        text += f'\n[policy.{policy}]\n' + ''.join(f'{k} = {v}\n' for k, v in params.items())
    with tempfile.NamedTemporaryFile('w', suffix='.toml') as f:
        f.write(text)
        f.flush()
        args = [sim, 'run', f.name, '--json', '--jobs', '2']
        for p in policies:
            args += ['--policy', p]
        out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr)
    return json.loads(out.stdout)['scenarios'][0]['runs']


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--policy', default='balance')
    ap.add_argument('--seeds', default='0,100,200', help='offsets added to each scenario\'s seed')
    ap.add_argument('--sim', default=os.path.join(ROOT, 'build/tools/sim/bulkhead-sim'))
    ap.add_argument('params', nargs='*', metavar='KEY=VALUE')
    a = ap.parse_args()
    params = dict(p.split('=', 1) for p in a.params)
    offsets = [int(s) for s in a.seeds.split(',')]
    scenarios = sorted(os.path.join(ROOT, 'scenarios', f) for f in os.listdir(os.path.join(ROOT, 'scenarios'))
                       if f.endswith('.toml'))
    short_ref = short_static = 0.0
    for scenario in scenarios:
        cells = []
        for offset in offsets:
            refs = run(a.sim, scenario, offset, a.policy, {}, REFERENCES)
            mine = run(a.sim, scenario, offset, a.policy, params, [a.policy])
            me = next(r for r in mine if r['policy'] == a.policy)
            best = max((r for r in refs if r['policy'] in REFERENCES and r['policy'] != a.policy),
                       key=lambda r: r['goodput_pct'])
            static = next(r for r in refs if r['kind'] == 'static-best')
            gap = me['goodput_pct'] - best['goodput_pct']
            worse = '!' if me['p99_vs_noload'] > best['p99_vs_noload'] else ' '
            sgap = me['goodput_pct'] - static['goodput_pct']
            short_ref += min(gap, 0)
            short_static += min(sgap, 0)
            cells.append(f"{me['goodput_pct']:5.1f}/{me['p99_vs_noload']:4.2f} {gap:+5.1f}{worse} {sgap:+5.1f}")
        print(f'{os.path.basename(scenario)[:-5]:27s}' + ' | '.join(cells))
    print(f'shortfall summed over scenarios and seeds: {short_ref:.1f} points vs the best reference, '
          f'{short_static:.1f} vs the best static limit')


main()
