"""Scripted sim expert: subtask-conditioned IK controller returning H-step joint-target chunks."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from lerobot_lang_nodes.sim.ik import IkSolver, top_down_rotation
from lerobot_lang_nodes.sim.scene import HOME_QPOS, JOINT_NAMES, PAN_AXIS_XY
from lerobot_lang_nodes.sim.tasks import (
    Subtask, decompose, explain_task, infer_subtask_index, parse_subtask)

_LOG = logging.getLogger(__name__)


class UnknownInstructionError(ValueError):
    """The instruction is neither a scene task nor a subtask the expert can execute."""


@dataclass(frozen=True)
class ExpertConfig:
    """Speeds, heights and gripper settings of the scripted expert."""

    horizon: int = 20
    ctrl_hz: float = 30.0
    speed: float = 0.12            # m/s of the grasp point in free space
    descend_speed: float = 0.05    # m/s for the final approach onto a cube
    hover_dz: float = 0.05         # m above the cube centre before descending
    carry_clearance: float = 0.025  # m between the held cube's bottom and the bowl rim
    align_tol: float = 0.01        # m horizontal error under which the descent starts
    open_rad: float = 0.6
    squeeze_rad: float = 0.1       # gripper target this far past first contact (~1.8 N m)
    max_joint_step: float = 0.06   # rad per control tick, keeps chunks smooth
    ik_iterations: int = 12
    jaw_clearance: float = 0.032   # m wanted between an open jaw and any other object
    # A new chunk continues the arm's command rather than starting from where the arm is: a
    # position servo trails its target, and a chunk that restarts from the trailing position
    # pulls the target back, so each replan slowed the arm (against a replan every 10 ticks:
    # +4 % every 7, +22 % every 4, +53 % every 2). Only while the measured position is within
    # this of the command (rad; the servos trail it by 0.013 rad median, 0.05 at most, in
    # the pick-and-place tasks).
    continue_tol_rad: float = 0.1


@dataclass
class _Memory:
    """Per-cube choice of grasp jaw direction, kept while the cube stays put."""

    jaw: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class ScriptedExpert:
    """Maps (instruction, joint positions, scene ground truth) to an (H, 6) joint-target chunk."""

    def __init__(self, model: mujoco.MjModel, config: ExpertConfig | None = None) -> None:
        self.config = config or ExpertConfig()
        self.ik = IkSolver(model)
        self._mem = _Memory()
        self.last_subtask: Subtask | None = None
        # (time of row 0, targets without the gravity offset) of the last chunk, and the
        # command the chunk being made starts from (None: the measured position).
        self._last: tuple[float, np.ndarray] | None = None
        self._start: np.ndarray | None = None
        self._plain = np.empty((0, len(JOINT_NAMES)))

    @property
    def last_plan(self) -> np.ndarray:
        """The last chunk's targets without the gravity offset (where the arm should be, one
        row per control tick; empty before the first chunk)."""
        return self._plain.copy()

    def reset(self) -> None:
        """Forget per-episode choices (call after a scene reset)."""
        self._mem = _Memory()
        self.last_subtask = None
        self._last = None

    # ------------------------------------------------------------------------------ public
    def resolve(self, instruction: str, gt: dict[str, Any]) -> Subtask | None:
        """Subtask to execute for ``instruction``: parsed directly, or inferred for a task."""
        sub = parse_subtask(instruction)
        if sub is not None:
            return sub
        spec, reason = explain_task(instruction)
        if spec is None:
            raise UnknownInstructionError(
                f'scripted expert cannot execute {instruction!r}: {reason}; it runs a task '
                "('put the red cube in the bowl', 'pick up the red cube'), a cube subtask "
                "('reach|grasp|lift|release the red cube', 'move the red cube over the "
                "bowl') or a skill ('open the gripper', 'close the gripper', 'go home')")
        plan = decompose(spec)
        index = infer_subtask_index(plan, gt)
        return plan[index] if index < len(plan) else None

    def act(self, instruction: str, joint_positions: np.ndarray, gt: dict[str, Any],
            now_s: float | None = None) -> np.ndarray:
        """(H, 6) joint-position targets in radians, ``JOINT_NAMES`` order, one per ctrl tick.

        ``now_s``: the time of the observation, when row k is due at ``now_s + k / ctrl_hz``.
        With it, the chunk continues the command of the previous chunk at that time (see
        ``ExpertConfig.continue_tol_rad``); without it, it starts from ``joint_positions``.
        """
        q = np.asarray(joint_positions, dtype=np.float64).reshape(-1)
        if q.shape != (len(JOINT_NAMES),):
            raise ValueError(f'joint_positions must have 6 entries {JOINT_NAMES}, got {q.shape}')
        sub = self.resolve(instruction, gt)
        self.last_subtask = sub
        self._start = self._command_at(now_s, q)
        chunk = self._act(sub, q, gt)
        self._last = None if now_s is None else (float(now_s), self._plain)
        return chunk

    def _command_at(self, now_s: float | None, q: np.ndarray) -> np.ndarray | None:
        """The arm command the last chunk held just before ``now_s``, if the arm follows it."""
        if now_s is None or self._last is None:
            return None
        t0, targets = self._last
        k = int(round((float(now_s) - t0) * self.config.ctrl_hz)) - 1
        if not 0 <= k < len(targets):
            return None
        command = targets[k].copy()
        command[5] = q[5]  # the gripper's target is each subtask's own
        if np.max(np.abs(command - q)) > self.config.continue_tol_rad:
            return None  # blocked, pushed or paused: start from where the arm is
        return command

    def _act(self, sub: Subtask | None, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        if sub is None:
            # Task already achieved: hold still, keeping a held cube held (pick tasks).
            holding = gt['gripper'].get('holding')
            if holding:
                size = gt['objects'][f'{holding}_cube']['size']
                return self._hold(q, gripper=self._close_target(size))
            return self._hold(q, gripper=self.config.open_rad)
        handler = getattr(self, f'_{sub.action}')
        return handler(sub.colour, q, gt)

    # ------------------------------------------------------------------- skills (no cube)
    def _open_gripper(self, _colour: str, q: np.ndarray, _gt: dict[str, Any]) -> np.ndarray:
        return self._hold(q, gripper=self.config.open_rad)

    def _close_gripper(self, _colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        holding = gt['gripper'].get('holding')  # around a held cube: squeeze, not crush
        if holding:
            return self._hold(q, gripper=self._close_target(
                gt['objects'][f'{holding}_cube']['size']))
        return self._hold(q, gripper=float(self.ik.lower[5]))

    def _home(self, _colour: str, q: np.ndarray, _gt: dict[str, Any]) -> np.ndarray:
        """Straight to the home pose in joint space, max_joint_step per tick."""
        cfg = self.config
        prev = (q if self._start is None else self._start).copy()
        chunk = np.empty((cfg.horizon, len(JOINT_NAMES)))
        self._plain = plain = np.empty_like(chunk)
        for k in range(cfg.horizon):
            prev = prev + np.clip(HOME_QPOS - prev, -cfg.max_joint_step, cfg.max_joint_step)
            plain[k] = prev
            chunk[k] = prev + self.ik.gravity_offset(prev)
        return chunk

    # ---------------------------------------------------------------------------- subtasks
    def _reach(self, colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        cfg = self.config
        cube = np.array(gt['objects'][f'{colour}_cube']['position'])
        jaw, _ = self._jaw_for(colour, q, gt)
        rot = top_down_rotation(jaw)
        gp, _ = self.ik.forward(q)
        hover = cube + [0.0, 0.0, cfg.hover_dz]
        aligned = (math.hypot(*(gp[:2] - cube[:2])) <= cfg.align_tol
                   and self.ik.jaw_error(q, jaw) < 0.12 and self.ik.tilt(q) < 0.15)
        if not aligned:
            # Rise first when low, so the open jaws never sweep through other objects.
            waypoints = []
            if gp[2] < hover[2] - 0.01:
                waypoints.append((np.array([gp[0], gp[1], hover[2]]), cfg.speed))
            waypoints += [(hover, cfg.speed), (cube, cfg.descend_speed)]
        else:
            waypoints = [(cube, cfg.descend_speed)]
        return self._follow(q, waypoints, rot, cfg.open_rad)

    def _grasp(self, colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        cube = gt['objects'][f'{colour}_cube']
        gp, rot = self.ik.forward(q)
        # Finish the descent while closing: reach may hand over a few millimetres high.
        goal = np.array([gp[0], gp[1], cube['position'][2]])
        return self._follow(q, [(goal, self.config.descend_speed)], self._keep_jaw(rot),
                            self._close_target(cube['size']))

    def _lift(self, colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        gp, rot = self.ik.forward(q)
        goal = np.array([gp[0], gp[1], self._carry_z(gt)])
        size = gt['objects'][f'{colour}_cube']['size']
        return self._follow(q, [(goal, self.config.speed * 0.6)], self._keep_jaw(rot),
                            self._close_target(size))

    def _move_over(self, colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        cfg = self.config
        gp, rot = self.ik.forward(q)
        cube = np.array(gt['objects'][f'{colour}_cube']['position'])
        drop = drop_point(gt, colour)
        carry_z = self._carry_z(gt)
        # Aim the cube, not the grasp point, at the drop point: the grip may hold it offset.
        grip_offset = cube[:2] - gp[:2]
        goal = np.array([drop[0] - grip_offset[0], drop[1] - grip_offset[1], carry_z])
        waypoints = []
        if gp[2] < carry_z - 0.01:
            waypoints.append((np.array([gp[0], gp[1], carry_z]), cfg.speed * 0.6))
        waypoints.append((goal, cfg.speed))
        size = gt['objects'][f'{colour}_cube']['size']
        return self._follow(q, waypoints, self._keep_jaw(rot), self._close_target(size))

    def _release(self, colour: str, q: np.ndarray, gt: dict[str, Any]) -> np.ndarray:
        del colour, gt
        return self._hold(q, gripper=self.config.open_rad)

    # ----------------------------------------------------------------------------- helpers
    def _close_target(self, size: float) -> float:
        """Gripper target a little past first contact with a cube of ``size``: a firm but not
        crushing grip (the servo force is kp times the overshoot)."""
        return max(self.ik.jaw_angle_for_gap(size) - self.config.squeeze_rad,
                   float(self.ik.lower[5]))

    def _carry_z(self, gt: dict[str, Any]) -> float:
        """Grasp-point height that carries a cube with its bottom clear of the bowl rim."""
        bowl = gt['bowl']
        size = next(iter(gt['objects'].values()))['size']
        return float(bowl['position'][2] + bowl['rim_height'] + self.config.carry_clearance
                     + size / 2.0)

    @staticmethod
    def _keep_jaw(rot: np.ndarray) -> np.ndarray:
        """Top-down rotation keeping the current horizontal jaw direction."""
        jaw = rot[:, 2].copy()
        jaw[2] = 0.0
        if np.linalg.norm(jaw) < 1e-6:
            jaw = rot[:, 1].copy()
            jaw[2] = 0.0
        return top_down_rotation(jaw / np.linalg.norm(jaw))

    def _jaw_for(self, colour: str, q: np.ndarray, gt: dict[str, Any]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Jaw direction for grasping a cube: along a face normal, feasible, clear of others."""
        cube = gt['objects'][f'{colour}_cube']
        pos = np.array(cube['position'])
        cached = self._mem.jaw.get(colour)
        if cached is not None and np.linalg.norm(cached[1] - pos) < 0.01:
            return cached[0], cached[1]
        cfg = self.config
        others = [np.array(o['position']) for name, o in gt['objects'].items()
                  if name != f'{colour}_cube']
        bowl = np.array(gt['bowl']['position'])
        bowl_r = gt['bowl']['inner_radius']
        _, rot_now = self.ik.forward(q)
        best: tuple[float, np.ndarray] | None = None
        for k in range(4):
            angle = cube['yaw'] + k * math.pi / 2.0
            jaw = np.array([math.cos(angle), math.sin(angle), 0.0])
            q_sol, err = None, np.inf
            # DLS cannot wrap the roll joint: seed it on both sides and keep the best.
            for roll in (q[4], -2.0, 0.0, 2.0):
                cand, cand_err = self.ik.solve(pos, top_down_rotation(jaw),
                                               self._seed_for(q, pos, roll), iterations=60)
                cand_err += 0.01 * self.ik.jaw_error(cand, jaw)
                if cand_err < err:
                    q_sol, err = cand, cand_err
            if (err > 0.004 or self.ik.tilt(q_sol) > 0.15
                    or self.ik.jaw_error(q_sol, jaw) > 0.08):
                continue
            # The open moving jaw sits ~4.5 cm along +jaw, the fixed jaw ~2 cm along -jaw.
            probes = [pos + 0.045 * jaw, pos - 0.02 * jaw]
            clearance = min(
                [float(np.linalg.norm((p - o)[:2])) - 0.02 for p in probes for o in others]
                + [abs(float(np.linalg.norm((p - bowl)[:2])) - bowl_r) for p in probes])
            roll_change = abs(q_sol[4] - q[4])
            score = min(clearance, cfg.jaw_clearance) * 10.0 - 0.1 * roll_change \
                - 0.5 * self.ik.tilt(q_sol) + 0.05 * float(rot_now[:, 2] @ jaw)
            if best is None or score > best[0]:
                best = (score, jaw)
        if best is None:
            _LOG.warning('no clean top-down grasp for the %s cube at %s; using its x face',
                         colour, np.round(pos, 3))
            jaw = np.array([math.cos(cube['yaw']), math.sin(cube['yaw']), 0.0])
        else:
            jaw = best[1]
        self._mem.jaw[colour] = (jaw, pos)
        return jaw, pos

    @staticmethod
    def _seed_for(q: np.ndarray, target: np.ndarray, roll: float) -> np.ndarray:
        """IK seed on the elbow-up branch, panned toward ``target``."""
        seed = HOME_QPOS.copy()
        seed[0] = -math.atan2(target[1] - PAN_AXIS_XY[1], target[0] - PAN_AXIS_XY[0])
        seed[4] = roll
        seed[5] = q[5]
        return seed

    def _hold(self, q: np.ndarray, gripper: float) -> np.ndarray:
        _, rot = self.ik.forward(q)
        return self._follow(q, [], self._keep_jaw(rot), gripper)

    def _follow(self, q: np.ndarray, waypoints: list[tuple[np.ndarray, float]],
                rot_des: np.ndarray, gripper: float) -> np.ndarray:
        """IK-track a polyline of (point, speed) from the current grasp point for H ticks."""
        cfg = self.config
        dt = 1.0 / cfg.ctrl_hz
        base = q if self._start is None else self._start
        start, _ = self.ik.forward(base)
        samples = _sample_polyline(start, waypoints, dt, cfg.horizon)
        chunk = np.empty((cfg.horizon, len(JOINT_NAMES)))
        self._plain = plain = np.empty_like(chunk)
        prev = base.copy()
        seed = base.copy()
        for k, point in enumerate(samples):
            sol, _ = self.ik.solve(point, rot_des, seed, iterations=cfg.ik_iterations)
            step = np.clip(sol - prev, -cfg.max_joint_step, cfg.max_joint_step)
            target = prev + step
            target[5] = gripper
            prev = target
            seed = target
            plain[k] = target
            chunk[k] = target + self.ik.gravity_offset(target)
        return chunk


def drop_point(gt: dict[str, Any], colour: str, ring: float = 0.02) -> np.ndarray:
    """Bowl point (x, y) to release ``colour`` over: the centre, or the ring point farthest
    from cubes already in the bowl so a second cube does not land on the first."""
    bowl = np.array(gt['bowl']['position'][:2])
    inside = [np.array(o['position'][:2]) for name, o in gt['objects'].items()
              if o['in_bowl'] and name != f'{colour}_cube']
    if not inside:
        return bowl
    candidates = [bowl] + [bowl + ring * np.array([math.cos(a), math.sin(a)])
                           for a in np.linspace(0.0, 2.0 * math.pi, 8, endpoint=False)]
    return max(candidates, key=lambda p: min(float(np.linalg.norm(p - c)) for c in inside))


def _sample_polyline(start: np.ndarray, waypoints: list[tuple[np.ndarray, float]], dt: float,
                     n: int) -> list[np.ndarray]:
    """``n`` points along start -> waypoints, each segment at its own speed, clamped at the end."""
    points: list[np.ndarray] = []
    cur = np.asarray(start, dtype=np.float64)
    segments = list(waypoints)
    carry = 0.0
    while len(points) < n:
        if not segments:
            points.append(cur.copy())
            continue
        goal, speed = segments[0]
        delta = goal - cur
        dist = float(np.linalg.norm(delta))
        step = speed * dt - carry
        if dist <= step:
            carry = dist if dist < step else 0.0
            cur = np.asarray(goal, dtype=np.float64)
            segments.pop(0)
            if not segments:
                points.append(cur.copy())
            continue
        cur = cur + delta / dist * step
        carry = 0.0
        points.append(cur.copy())
    return points
