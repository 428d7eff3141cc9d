"""Damped-least-squares IK for the SO-101 grasp point on a private MjData (sim state untouched)."""

from __future__ import annotations

import math

import mujoco
import numpy as np

from lerobot_lang_nodes.sim.scene import EE_SITE, GRASP_POINT_OFFSET, HOME_QPOS, JOINT_NAMES

ARM_JOINTS = JOINT_NAMES[:5]
DOWN = np.array([0.0, 0.0, -1.0])
STALL_RAD = 1e-10  # an iteration moving no joint by more than this has converged


def top_down_rotation(jaw_dir: np.ndarray) -> np.ndarray:
    """Site rotation with the approach axis (site x) down and the jaw axis (site z) on jaw_dir."""
    z = np.array([jaw_dir[0], jaw_dir[1], 0.0])
    z /= np.linalg.norm(z)
    x = DOWN
    y = np.cross(z, x)
    return np.column_stack([x, y, z])


class IkSolver:
    """Grasp-point position + orientation IK over the five arm joints, gripper untouched."""

    def __init__(self, model: mujoco.MjModel, damping: float = 1e-4) -> None:
        self.model = model
        # A private MjData: solving never perturbs the simulation's state.
        self.data = mujoco.MjData(model)
        self._site = model.site(EE_SITE).id
        self._qadr = np.array([model.joint(n).qposadr[0] for n in JOINT_NAMES])
        self._dadr = np.array([model.joint(n).dofadr[0] for n in JOINT_NAMES])
        jnt = [model.joint(n).id for n in JOINT_NAMES]
        self.lower = model.jnt_range[jnt, 0].copy()
        self.upper = model.jnt_range[jnt, 1].copy()
        self.kp = model.actuator_gainprm[[model.actuator(n).id for n in JOINT_NAMES], 0].copy()
        self.damping = damping
        self.stall_rad = STALL_RAD  # 0: always run every iteration (bench/sim_expert.py)
        self._jp = np.zeros((3, model.nv))
        self._jr = np.zeros((3, model.nv))

    def _set(self, q: np.ndarray) -> None:
        self.data.qpos[self._qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World grasp point (3,) and site rotation (3, 3) at joint angles ``q`` (6,)."""
        self._set(q)
        rot = self.data.site_xmat[self._site].reshape(3, 3).copy()
        return self.data.site_xpos[self._site] + rot @ GRASP_POINT_OFFSET, rot

    def solve(self, target: np.ndarray, rot_des: np.ndarray | None, q_seed: np.ndarray,
              iterations: int = 40, tol: float = 3e-4) -> tuple[np.ndarray, float]:
        """Joint angles (6,) putting the grasp point on ``target``; returns (q, position error m).

        Position is the primary task; ``rot_des`` is tracked in its null space, so where the
        wrist_flex limit forbids a vertical approach the gripper tilts instead of missing.
        """
        q = np.clip(np.asarray(q_seed, dtype=np.float64).copy(), self.lower, self.upper)
        pos_err = np.inf
        lam = self.damping
        for _ in range(iterations):
            pos, rot = self.forward(q)
            err = target - pos
            mujoco.mj_jac(self.model, self.data, self._jp, self._jr, pos,
                          self.model.site_bodyid[self._site])
            jp_full = self._jp[:, self._dadr[:5]]
            jr_full = self._jr[:, self._dadr[:5]]
            pos_err = float(np.linalg.norm(err))
            rerr = np.zeros(3)
            if rot_des is not None:
                quat_err = np.zeros(4)
                mujoco.mju_mat2Quat(quat_err, (rot_des @ rot.T).reshape(-1))
                mujoco.mju_quat2Vel(rerr, quat_err, 1.0)
            rot_err = float(np.linalg.norm(rerr))
            # Active set: a joint at a limit that the step would push further is frozen, so
            # the remaining joints keep solving the position instead of being clipped away.
            free = np.ones(5)
            for _pass in range(3):
                jp = jp_full * free
                jp_pinv = jp.T @ np.linalg.inv(jp @ jp.T + lam * np.eye(3))
                dq = jp_pinv @ err
                if rot_des is not None:
                    jr = jr_full * free
                    null = np.eye(5) - jp_pinv @ jp
                    jr_n = jr @ null
                    dq = dq + null @ (jr_n.T @ np.linalg.solve(
                        jr_n @ jr_n.T + 10 * lam * np.eye(3), rerr - jr @ dq))
                stuck = (((q[:5] <= self.lower[:5] + 1e-6) & (dq < 0))
                         | ((q[:5] >= self.upper[:5] - 1e-6) & (dq > 0))) & (free > 0)
                if not stuck.any():
                    break
                free[stuck] = 0.0
            if pos_err < tol and rot_err < 10 * tol:
                break
            # Small steps keep the iteration on the branch nearest the seed.
            scale = min(1.0, 0.3 / max(1e-9, float(np.max(np.abs(dq)))))
            moved = np.clip(q[:5] + scale * dq, self.lower[:5], self.upper[:5])
            if float(np.max(np.abs(moved - q[:5]))) < self.stall_rad:
                # A fixed point short of tol (a joint limit, or the orientation's null-space
                # trade-off): more iterations change nothing, and a far target's chunk would
                # otherwise spend every row's full budget here (the expert's reaction time).
                break
            q[:5] = moved
        return q, pos_err

    def jaw_angle_for_gap(self, gap: float) -> float:
        """Gripper angle (rad) at which the fingertip pads are ``gap`` metres apart."""
        fixed = self.model.geom('fixed_jaw_pad').id
        moving = self.model.geom('moving_jaw_pad').id
        # Pad centre distance minus the pads' half-thicknesses along the jaw axis.
        thickness = float(self.model.geom_size[fixed, 0] + self.model.geom_size[moving, 0])
        lo, hi = float(self.lower[5]), float(self.upper[5])
        q = HOME_QPOS.copy()
        for _ in range(30):
            q[5] = 0.5 * (lo + hi)
            self._set(q)
            dist = float(np.linalg.norm(self.data.geom_xpos[fixed] - self.data.geom_xpos[moving]))
            if dist - thickness > gap:
                hi = q[5]
            else:
                lo = q[5]
        return 0.5 * (lo + hi)

    def jaw_error(self, q: np.ndarray, jaw_dir: np.ndarray) -> float:
        """Angle (rad) between the horizontal jaw axis (site z) at ``q`` and ``jaw_dir``."""
        _, rot = self.forward(q)
        axis = rot[:, 2].copy()
        axis[2] = 0.0
        norm = float(np.linalg.norm(axis))
        if norm < 1e-6:
            return math.pi
        return float(np.arccos(np.clip(axis @ jaw_dir / norm, -1.0, 1.0)))

    def tilt(self, q: np.ndarray) -> float:
        """Angle (rad) between the approach axis (site x) and straight down at ``q``."""
        _, rot = self.forward(q)
        return float(np.arccos(np.clip(rot[:, 0] @ DOWN, -1.0, 1.0)))

    def gravity_offset(self, q: np.ndarray) -> np.ndarray:
        """Target offset (6,) that cancels gravity sag of the position servos at ``q``."""
        self._set(q)
        self.data.qvel[:] = 0.0
        mujoco.mj_comVel(self.model, self.data)
        bias = np.zeros(self.model.nv)
        mujoco.mj_rne(self.model, self.data, 0, bias)
        offset = bias[self._dadr] / self.kp
        offset[5] = 0.0
        return offset
