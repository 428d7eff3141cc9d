"""The bring-up's session folder settings and task outcome announcements (no DDS)."""

from __future__ import annotations

import argparse
import types

import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.cli import bringup


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bringup.add_arguments('sim', parser)
    return parser.parse_args(argv)


def test_session_params_route_the_sinks_into_the_session_folder(tmp_path):
    args = _args('--record', '--viewer-port', '8123', '--output-dir', str(tmp_path / 's'))
    folder = bringup.session_dir(args)
    made = bringup.plan('sim', args)
    specs = list(made.specs)
    assert [s.name for s in specs] == [*(s.name for s in graph.SIM), 'recorder']
    params = yaml.safe_load(bringup.session_params(made.params, folder, args, specs,
                                                   made.source).read_text())
    assert 'viewer' not in params  # keys that match under any namespace
    viewer = params['/**/viewer']['ros__parameters']
    assert viewer['mp4_path'] == str(folder / 'live_view.mp4')
    assert viewer['latest_png_path'] == str(folder / 'latest.png')
    assert viewer['port'] == 8123
    recorder = params['/**/recorder']['ros__parameters']
    assert recorder['output_dir'] == str(folder / 'bags') and recorder['use_sim_time'] is True
    shipped = yaml.safe_load(graph.default_params_file('sim').read_text())
    planner = params['/**/planner']['ros__parameters']
    # A planner restarted in the session resumes from its state file there.
    assert planner.pop('state_file') == str(folder / 'planner_state.json')
    assert planner.pop('task') == bringup.DEFAULT_SIM_TASK
    assert planner.pop('cameras') == ['front', 'wrist']  # the simulator's, fanned out
    assert planner == shipped['planner']['ros__parameters']


def test_default_session_folder_is_under_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = bringup.session_dir(_args())
    assert folder.parent == tmp_path / 'outputs' and folder.is_dir()


def test_outcomes_are_announced_once_with_the_time_taken():
    said: list[str] = []
    announcer = bringup.OutcomeAnnouncer(said.append)

    def ctx(task: str):
        return types.SimpleNamespace(task=task)

    def outcome(goal: str, success: bool, revision: int = 1):
        return types.SimpleNamespace(goal=goal, success=success, context_revision=revision,
                                     detail=f'{goal}: done')

    announcer.on_context(ctx('put the red cube in the bowl'))
    announcer.on_outcome(outcome('put the red cube in the bowl', False))
    assert said == ['task: put the red cube in the bowl'] and not announcer.succeeded
    for _ in range(3):  # the outcome is latched and periodic: one announcement
        announcer.on_outcome(outcome('put the red cube in the bowl', True))
    assert len(said) == 2 and announcer.succeeded
    assert said[1].startswith('task succeeded: put the red cube in the bowl')
    assert said[1].endswith(' s') and 'after ' in said[1]
    announcer.on_outcome(outcome('put the red cube in the bowl', True, revision=2))
    assert len(said) == 3
