"""The closed loop's scenes and held-out tasks (training/evaluation.py): the same for every run
of a seed, so a learned model is compared on the scenes its baseline met."""

from __future__ import annotations

from lerobot_lang_nodes.training.evaluation import (COLOURS, eval_plan, moves_on_latencies,
                                                    moves_on_share, scene_plan)


def test_held_out_episodes_reset_to_known_seeds_with_a_pick_every_third():
    plan = eval_plan(eval_seed=7, n=6)
    assert [seed for seed, _ in plan] == [7 + 1000 * k for k in range(1, 7)]  # sim/reset k
    assert plan == eval_plan(eval_seed=7, n=6)
    for k, (_seed, task) in enumerate(plan, start=1):
        assert task.startswith('pick up the' if k % 3 == 0 else 'put the'), (k, task)
        assert any(c in task for c in COLOURS)


def test_collection_scenes_put_every_cube_in_the_bowl_once():
    plain = scene_plan(0, seed=3, interject=False)
    assert sorted(s['task'] for s in plain) == sorted(f'put the {c} cube in the bowl'
                                                      for c in COLOURS)
    assert scene_plan(1, seed=3, interject=False)[0]['task'].startswith('pick up the')
    redirected = scene_plan(2, seed=3, interject=True)
    first = redirected[0]
    assert first['interjection'].startswith('use the') and first['vqa']
    goals = [first['interjected_goal']] + [s['task'] for s in redirected[1:]]
    assert sorted(goals) == sorted(f'put the {c} cube in the bowl' for c in COLOURS)


def test_how_soon_the_planner_follows_each_change_of_the_expert():
    r, g, l_ = 'reach the red cube', 'grasp the red cube', 'lift the red cube'
    timeline = [(0.0, r, ''), (0.1, r, r),
                (1.0, g, r), (1.2, g, r), (1.3, g, g),   # followed after 0.3 s
                (2.0, l_, l_),                           # already there: 0
                (3.0, 'move the red cube over the bowl', l_),  # never, then the task ends
                (4.0, '', l_)]
    assert moves_on_latencies(timeline) == [0.3, 0.0, None]
    assert moves_on_share(moves_on_latencies(timeline)) == round(2 / 3, 4)
    slow = [(0.0, r, r), (1.0, g, r), (1.6, g, g)]
    assert moves_on_latencies(slow) == [0.6] and moves_on_share([0.6]) == 0.0
    assert moves_on_share([]) is None
