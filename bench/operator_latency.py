"""Operator command latency: a one-shot `lerobot-lang say` and a console line, to delivery.

Usage: python bench/operator_latency.py [--repeats 5]

A subscriber on /interjection in this process stands in for the planner (it receives what the
planner's subscription receives, over the same DDS transport). Measured, side by side in one
run:

* one-shot: from starting `lerobot-lang say TEXT` (a new process that joins the graph, waits
  for the planner's subscription, publishes and exits) to the text arriving;
* console: `lerobot-lang console`, connected once, reading lines from a pipe; from writing a
  line to its arrival.

The one-shot needs a subscriber to discover before it publishes, as the planner is: this
process's subscriber is it. Writes bench/reports/operator_latency.{json,md}; a private ROS
domain, discovery LOCALHOST, every process stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from bench.harness import write_report

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
CLI = [sys.executable, '-m', 'lerobot_lang_nodes.cli.main']


def arrival(interjections, text: str, timeout_s: float) -> float:
    msg = interjections.wait_for(lambda m: m.data == text, timeout_s=timeout_s,
                                 what=f'{text!r} on /interjection')
    return interjections.stamps[interjections.snapshot().index(msg)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    from domain_coordinator import domain_id

    from lerobot_lang_nodes import dds
    rows: dict[str, list[float]] = {'one-shot `lerobot-lang say`': [], 'console line': []}
    with domain_id() as domain:
        env = dds.ros_environment(domain_id=domain)
        env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
        env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
        os.environ.update(env)
        from std_msgs.msg import String

        from lerobot_lang_nodes.nodes import qos
        from lerobot_lang_nodes.testing import Collector, RosProbe
        probe = RosProbe('planner')  # the name `say` waits to see subscribed
        inter = Collector()
        inter.stamps = []

        def stamped(msg: Any) -> None:  # stamped on arrival, before anything else runs
            inter.stamps.append(time.monotonic())
            inter(msg)
        probe.node.create_subscription(String, 'interjection', stamped, qos.COMMAND)
        console = subprocess.Popen(CLI + ['console'], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=dict(os.environ), bufsize=1)
        try:
            for i in range(args.repeats):
                text = f'use the blue cube instead (say {i})'
                start = time.monotonic()
                subprocess.run(CLI + ['say', text], check=True, capture_output=True, timeout=60,
                               env=dict(os.environ))
                rows['one-shot `lerobot-lang say`'].append(arrival(inter, text, 30.0) - start)
            for i in range(args.repeats + 1):
                text = f'use the green cube instead (console {i})'
                start = time.monotonic()
                console.stdin.write(text + '\n')
                console.stdin.flush()
                got = arrival(inter, text, 60.0) - start
                if i > 0:  # the first line also waits for the console to connect
                    rows['console line'].append(got)
        finally:
            if console.poll() is None:
                console.stdin.close()
                try:
                    console.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    console.kill()
                    console.wait()
            probe.close()
    report = {'run': {'repeats': args.repeats, 'date': time.strftime('%Y-%m-%d'),
                      'machine': f'{platform.machine()}, {os.cpu_count()} cores',
                      'load_average_1min_at_end': round(os.getloadavg()[0], 2)},
              'latency_s': {k: [round(v, 4) for v in vals] for k, vals in rows.items()}}
    lines = ['# Operator command latency', '',
             f"{args.repeats} commands each, one run on {report['run']['machine']} "
             f"({report['run']['date']}, load average "
             f"{report['run']['load_average_1min_at_end']}); from starting the command to the "
             'text arriving at a subscriber on /interjection (the planner\'s view).', '',
             '| path | median (ms) | min (ms) | max (ms) |', '|---|---|---|---|']
    for k, vals in rows.items():
        lines.append(f'| {k} | {statistics.median(vals) * 1e3:.1f} | {min(vals) * 1e3:.1f} | '
                     f'{max(vals) * 1e3:.1f} |')
    write_report(args.out, 'operator_latency', report, '\n'.join(lines) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
