"""The composed bring-up's graph: one `planner_policy` process in place of planner and policy."""

from __future__ import annotations

import argparse

import pytest

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.cli import bringup


def test_composed_graph_replaces_planner_and_policy_by_one_process():
    for name, specs in graph.GRAPHS.items():
        composed = graph.composed(specs)
        names = [s.name for s in composed]
        expected = [graph.COMPOSED_NAME if s.name == 'planner' else s.name
                    for s in specs if s.name != 'policy']
        assert names == expected, name
        (spec,) = (s for s in composed if s.hosts)
        assert spec.hosts == ('planner', 'policy') and spec.module == graph.COMPOSED_MODULE
        assert spec.use_sim_time == (name != 'real')  # the simulated graphs follow /clock


def test_a_composed_process_keeps_its_nodes_names():
    (spec,) = (s for s in graph.composed(graph.SIM) if s.hosts)
    args = graph.ros_args(spec, None)
    assert not any(a.startswith('__node:=') for a in args)  # would rename both nodes
    assert args == ['--ros-args', '-p', 'use_sim_time:=true']
    plain = graph.ros_args(graph.SIM[1], None)
    assert plain[:3] == ['--ros-args', '-r', '__node:=planner']


def test_composing_needs_both_nodes():
    with pytest.raises(ValueError, match="'planner', 'policy'"):
        graph.composed(graph.SIM[:2])


def test_lerobot_lang_composed_option_selects_the_composed_graph():
    parser = argparse.ArgumentParser()
    bringup.add_arguments('sim', parser)
    args = parser.parse_args(['--composed', '--no-viewer'])
    names = [s.name for s in bringup.plan('sim', args).specs]
    assert names == ['sim_bridge', graph.COMPOSED_NAME]
    plain = parser.parse_args([])
    assert [s.name for s in bringup.plan('sim', plain).specs] == [s.name for s in graph.SIM]
