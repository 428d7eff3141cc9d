"""The closed loop's scenes and held-out tasks (training/evaluation.py): the same for every run
of a seed, so a learned model is compared on the scenes its baseline met."""

from __future__ import annotations

from lerobot_lang_nodes.training.evaluation import COLOURS, eval_plan, scene_plan


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
