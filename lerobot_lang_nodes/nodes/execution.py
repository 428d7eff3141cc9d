"""What every chunk-executing node (sim_bridge, robocasa_bridge, so101_driver) shares:
parameters and intake."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lerobot_lang_msgs.msg import ActionChunk
from lerobot_lang_nodes.core.errors import InvalidChunk
from lerobot_lang_nodes.core.executor import MODE_PAUSED, ChunkExecutor, ExecutorConfig
from lerobot_lang_nodes.core.safety import limit_change_problem
from lerobot_lang_nodes.nodes import convert


@dataclass(frozen=True)
class ExecutorParams:
    """Executor parameters of every chunk-executing node (sim_bridge, robocasa_bridge,
    so101_driver)."""

    refill_fraction: float = field(default=0.5, metadata={
        'doc': 'Report needs_refill when the queue is below this fraction of the last chunk.',
        'range': (0.0, 1.0)})
    replace: str = field(default='tail', metadata={
        'doc': 'What a new chunk of the same revision does to the queued tail.',
        'choices': ('tail', 'blend', 'append')})
    time_align: bool = field(default=True, metadata={
        'doc': 'Skip the actions of a new chunk whose time (observation stamp + i * period) '
               'has already passed.'})
    start_paused: bool = field(default=False, metadata={
        'doc': 'Start in paused mode: nothing moves before the resume service is called.'})
    dry_run: bool = field(default=False, metadata={
        'doc': 'Dry run: chunks are accepted and played at the control rate but never sent '
               'to the robot, which holds; runtime_status reports planned and '
               'planned_target. The first thing to do with a new checkpoint.'})
    max_chunk_age_s: float = field(default=2.0, metadata={
        'doc': 'Discard a chunk whose observation stamp is older than this on arrival (s; '
               'the executor\'s own clock against the stamp the robot side issued): a chunk '
               'delayed by a stalled link to a remote policy is not played; counted as '
               'discarded_old_observation. 0 disables.', 'range': (0.0, 600.0)})
    status_hz: float = field(default=5.0, metadata={
        'doc': 'runtime_status rate (Hz); also sent at once when the queue crosses the refill '
               'threshold.', 'range': (0.1, 100.0)})


@dataclass(frozen=True)
class ArmExecutionParams(ExecutorParams):
    """What driving an SO-101 arm adds to the executor's parameters (joint safety, the dispatch
    log, teleop and takeover), the same on the simulator and the real arm."""

    max_relative_target_rad: float = field(default=0.35, metadata={
        'doc': 'Clamp every goal to within this of the freshly read present joint position '
               '(rad); 0 disables. The simulator applies the same rule as the driver. '
               'Settable at run time: tightened at any time, loosened only while paused.',
        'range': (0.0, 10.0), 'runtime': True})
    reject_margin_rad: float = field(default=0.5, metadata={
        'doc': 'Chunks with values further than this outside the joint limits are rejected '
               'as invalid (degrees sent as radians, garbage); values inside the margin are '
               'clamped to the limits.', 'range': (0.0, 10.0)})
    dispatch_log_path: str = field(default='', metadata={
        'doc': 'JSON-lines file with one line per action sent to the robot: loop time, '
               'wall-clock instant after the write, chunk, step and the clamped action '
               '(core/dispatch_file.py); empty disables.'})
    leader_joint_states_topic: str = field(default='leader/joint_states', metadata={
        'doc': "The leader arm's joint states (rad), tracked in run mode teleop (after the "
               'takeover service).'})
    leader_timeout_s: float = field(default=0.25, metadata={
        'doc': 'Teleop watchdog: a leader silent for longer than this holds the follower '
               '(runtime_status control_source none) until it speaks again (s).',
        'range': (0.01, 10.0)})
    teleop_align_speed_rad_s: float = field(default=0.5, metadata={
        'doc': "Takeover: the follower slides from its pose to the leader's at most this "
               'fast per joint (rad/s), then tracks the leader directly.',
        'range': (0.01, 10.0)})
    leader_node: str = field(default='so101_leader', metadata={
        'doc': "Takeover drives this leader node to the follower's pose (its hold_pose, then "
               'release) before the human commands; empty, or no such node: the follower '
               'slides to the leader instead.'})
    handover_tolerance_rad: float = field(default=0.05, metadata={
        'doc': "Takeover: the leader is at the follower's pose when every joint is this "
               'close (rad).', 'range': (0.001, 1.0)})
    handover_timeout_s: float = field(default=5.0, metadata={
        'doc': "Takeover: how long to wait for the driven leader to reach the follower's pose "
               '(s); then it is released and the follower slides.', 'range': (0.1, 60.0)})


def make_chunk_executor(params: ExecutorParams, action_names: tuple[str, ...], ctrl_hz: float,
                  lower: np.ndarray, upper: np.ndarray, margin: float | None = None,
                  **kw: Any) -> ChunkExecutor:
    """A ChunkExecutor that rejects values beyond the limits by ``margin`` (default the
    params' ``reject_margin_rad``)."""
    margin = params.reject_margin_rad if margin is None else margin
    teleop = ({'leader_timeout_s': params.leader_timeout_s,
               'teleop_align_speed_rad_s': params.teleop_align_speed_rad_s}
              if isinstance(params, ArmExecutionParams) else {})
    return ChunkExecutor(ExecutorConfig(
        action_names=tuple(action_names), ctrl_hz=ctrl_hz,
        lower_limits=(np.asarray(lower) - margin).tolist(),
        upper_limits=(np.asarray(upper) + margin).tolist(),
        refill_fraction=params.refill_fraction, replace=params.replace, **teleop,
        time_align=params.time_align, start_paused=params.start_paused,
        dry_run=params.dry_run, max_observation_age_s=params.max_chunk_age_s), **kw)


def submit_chunk_msg(executor: ChunkExecutor, msg: ActionChunk, now_s: float) -> None:
    """Hand an ActionChunk message to the executor; bad chunks are counted and logged."""
    try:
        chunk = convert.chunk_from_msg(msg)
    except InvalidChunk as exc:  # sizes that disagree: no Chunk can even be built
        executor.record_invalid(f'chunk {msg.sequence}: {exc}')
        return
    # The executor logs each refusal itself (one line, throttled) and counts it in its status.
    executor.submit(chunk, now_s)


def change_limits(node: Any, changes: dict) -> str:
    """`ros2 param set` on safety bounds: '' and ``node.cfg`` updated, or why not.

    Tightening is applied at any time, loosening only while the node's executor is paused.
    The caller then swaps in the objects built from the new ``node.cfg``.
    """
    paused = node.chunk_executor.mode == MODE_PAUSED
    for name, value in changes.items():
        problem = limit_change_problem(name, getattr(node.cfg, name), value, paused)
        if problem:
            return problem
    node.cfg = replace(node.cfg, **{k: float(v) for k, v in changes.items()})
    node.get_logger().info(f'safety limits changed at run time: {changes}')
    return ''
