"""`lerobot-lang real|sim` stop with an error when the driver or the simulator cannot run.

A driver without its calibration (a simulator with a parameter it does not know) exits 2 with
the reason; the bring-up must not go on with cameras, planner and policy and no arm: it stops
every node and exits non-zero, naming the node. The launch files do the same under
`ros2 launch` (test/nodes/test_launch_file.py). The run writes its parameters into the session
folder only: nothing is left in the temp folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from lerobot_lang_nodes import graph

pytestmark = pytest.mark.slow


@pytest.mark.parametrize('command', ['real', 'sim'])
def test_a_dead_driver_or_simulator_stops_the_bring_up_with_an_error(tmp_path, command):
    if command == 'real':
        ckpt = tmp_path / 'ckpt'
        ckpt.mkdir()
        (ckpt / 'config.json').write_text(json.dumps({'type': 'act'}))
        robot = tmp_path / 'robot.yaml'
        robot.write_text(yaml.safe_dump({
            'port': str(tmp_path / 'ttyUSB0'),
            'calibration': {'path': str(tmp_path / 'missing.json')},
            'policy': {'path': str(ckpt)}}))
        argv = ['real', str(robot)]
        executor, why = 'so101_driver', 'missing.json does not exist'
    else:
        own = yaml.safe_load(graph.default_params_file('sim').read_text())
        own['sim_bridge']['ros__parameters']['no_such_parameter'] = 1.0
        (tmp_path / 'my_sim.yaml').write_text(yaml.safe_dump(own))
        argv = ['sim', '--params-file', str(tmp_path / 'my_sim.yaml')]
        executor, why = 'sim_bridge', 'no_such_parameter'
    tmp = tmp_path / 'tmp'
    tmp.mkdir()
    out = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', *argv,
                          '--no-viewer', '--timeout', '120',
                          '--output-dir', str(tmp_path / 'session')],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, 'TMPDIR': str(tmp)})
    log = out.stdout + out.stderr
    assert out.returncode == 1, log[-4000:]
    assert (f'[lerobot-lang] required node {executor} exited with code 2; stopping the graph'
            in log), log[-4000:]
    assert f'[{executor}] ' in log and why in log, log[-4000:]
    assert log.rstrip().endswith('[lerobot-lang] stopped'), log[-2000:]
    assert (tmp_path / 'session' / 'params.yaml').is_file()
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith('lerobot_lang')) == []
