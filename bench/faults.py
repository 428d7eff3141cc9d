"""Run the fault suite and write its table to bench/reports/faults.md.

The suite (test/faults, plus the arm's serial-fault, swapped-motor and control-loop tests and
the recorder's SIGKILL test, which live beside the code they exercise) injects each fault
class into real nodes (separate processes over DDS, MuJoCo, the emulated arm) and fails if a
protection is missing; this script only runs it through the project's test runner (which
keeps DDS on this machine) and keeps the table it prints.

    .venv/bin/python bench/faults.py [--out bench/reports/faults.md] [pytest args...]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import subprocess
import sys

ROOT = Path(__file__).resolve().parent.parent
SUITE = ('faults', 'hardware/test_so101_fault_kinds.py', 'hardware/test_so101_driver_node.py',
         'hardware/test_so101_loop_errors.py', 'recording/test_recorder_node.py',
         'system/test_transformers_planner_graph.py', 'system/test_lerobot_policy_graph.py')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'reports' / 'faults.md')
    args, pytest_args = parser.parse_known_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, 'FAULTS_REPORT': str(args.out.resolve()),
           'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    cmd = [str(ROOT / 'scripts' / 'test.sh'), *(str(ROOT / 'test' / t) for t in SUITE), '-q',
           '-p', 'no:cacheprovider', *pytest_args]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == '__main__':
    sys.exit(main())
