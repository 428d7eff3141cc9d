"""Closed-loop episode driver: plan, completion checks and expert chunks at ctrl_hz (no ROS)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lerobot_lang_nodes.sim.expert import ScriptedExpert
from lerobot_lang_nodes.sim.scene import So101Scene
from lerobot_lang_nodes.sim.tasks import advance, check_success, decompose, explain_task

_LOG = logging.getLogger(__name__)


@dataclass
class EpisodeResult:
    """Outcome of one task episode; times are seconds of sim time from the episode start."""

    task: str
    success: bool
    sim_time: float
    wall_time: float
    subtasks: list[str] = field(default_factory=list)
    subtask_times: list[float] = field(default_factory=list)
    reason: str = ''

    @property
    def real_time_factor(self) -> float:
        """Sim seconds per wall second over the whole loop (physics + IK + rendering)."""
        return self.sim_time / self.wall_time if self.wall_time > 0 else float('inf')


def run_episode(scene: So101Scene, task: str, max_sim_s: float = 40.0,
                expert: ScriptedExpert | None = None, replan_every: int = 10,
                on_tick: Callable[[So101Scene, str], None] | None = None) -> EpisodeResult:
    """Run ``task`` on the scene as it is (no reset) until success or ``max_sim_s`` sim seconds.

    Each control tick checks the current subtask against ground truth (advancing, or going
    back after a drop), asks the expert for a new chunk every ``replan_every`` ticks or on a
    subtask change, and applies one chunk row. ``on_tick(scene, subtask_text)`` runs after
    every tick, e.g. to render frames.
    """
    spec, reason = explain_task(task)
    if spec is None:
        raise ValueError(reason)
    expert = expert or ScriptedExpert(scene.model)
    expert.reset()
    plan = decompose(spec)
    start_sim = scene.sim_time
    start_wall = time.perf_counter()
    index = 0
    result = EpisodeResult(task=task, success=False, sim_time=0.0, wall_time=0.0)
    chunk = None
    row = 0
    while True:
        elapsed = scene.sim_time - start_sim
        gt = scene.ground_truth()
        if check_success(spec, gt):
            result.success = True
            result.reason = 'success'
            break
        if elapsed >= max_sim_s:
            result.reason = f'timeout after {elapsed:.1f} s sim in {plan[index].text!r}'
            break
        new_index = min(advance(plan, index, gt), len(plan) - 1)
        if new_index != index or not result.subtasks:
            index = new_index
            result.subtasks.append(plan[index].text)
            result.subtask_times.append(round(elapsed, 3))
            _LOG.debug('t=%.2f subtask %s', elapsed, plan[index].text)
            chunk = None
        if chunk is None or row >= min(replan_every, len(chunk)):
            chunk = expert.act(plan[index].text, scene.joint_positions(), gt,
                               now_s=scene.sim_time)
            row = 0
        scene.apply_action(chunk[row])
        row += 1
        scene.step()
        if on_tick is not None:
            on_tick(scene, plan[index].text)
    result.sim_time = scene.sim_time - start_sim
    result.wall_time = time.perf_counter() - start_wall
    return result
