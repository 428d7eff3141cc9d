"""bench/policy_rollout.py as a user runs it: a checkpoint and the scripted expert on the same
held-out episode, with the reach figures that explain a failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_lang_nodes.testing import require_ml

BENCH = Path(__file__).resolve().parents[2] / 'bench' / 'policy_rollout.py'


@pytest.mark.timeout(300)
def test_a_checkpoint_and_the_expert_roll_out_on_the_same_held_out_episode(tmp_path):
    require_ml('torch', 'lerobot')
    from lerobot_lang_nodes.tiny_models.policies import build_tiny_act

    # A random ACT: it cannot do the task, so the report must say how far it got.
    checkpoint = build_tiny_act(tmp_path / 'act')
    out = subprocess.run([sys.executable, str(BENCH), 'scripted', str(checkpoint),
                          '--episodes', '1', '--timeout', '6', '--out', str(tmp_path / 'r')],
                         capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / 'r' / 'policy_rollout.json').read_text())
    expert, act = report['actors']
    assert expert['actor'] == 'scripted' and act['actor'] == str(checkpoint)
    assert [e['seed'] for e in expert['episodes']] == [e['seed'] for e in act['episodes']]
    # The demonstrator passes the reach tolerance and finishes; the random policy does not.
    assert expert['successes'] == 1 and expert['within_reach_tolerance'] == 1
    assert expert['episodes'][0]['closest_reach']['xy_mm'] < 8.0
    assert act['successes'] == 0 and act['episodes'][0]['furthest_subtask'] == 'reach'
    assert act['episodes'][0]['closest_reach']['xy_mm'] > 8.0
    assert act['inference_ms_p50'] > 0
    text = (tmp_path / 'r' / 'policy_rollout.md').read_text()
    assert text.startswith('# Policy rollouts without ROS') and '| `scripted` | 1/1 |' in text


def test_a_missing_checkpoint_folder_is_a_usage_error(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), str(tmp_path / 'nowhere')],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and 'no checkpoint folder' in out.stderr
