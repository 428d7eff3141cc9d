"""`robocasa_bridge` node: a RoboCasa kitchen (PandaOmron) behind the simulated graph's topics.

It runs in its own virtual environment (scripts/setup.sh --robocasa), because robosuite and
RoboCasa pin a MuJoCo older than the main stack's, and talks to the planner, policy, viewer
and recorder over DDS like any other node. One thread owns the scene (robosuite's renderer
stays on one thread): each control period it asks the core ChunkExecutor for the action due
now, steps the kitchen through robocasa.host.KitchenHost, and publishes clock, joint states,
the 16-D robot state, images and status. The ROS-free parts (action orders, seeds,
persistence, holding) live in lerobot_lang_nodes/robocasa/.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import LanguageContext, TaskOutcome
from lerobot_lang_nodes.core import camera_info
from lerobot_lang_nodes.core.control_loop import ControlLoop, LoopErrors, Outputs
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.bridge import SimulatorBridge
from lerobot_lang_nodes.nodes.execution import ExecutorParams, make_chunk_executor
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters
from lerobot_lang_nodes.robocasa import layout
from lerobot_lang_nodes.robocasa.envs import SIMULATORS, SPLITS, factory, reseed_rng
from lerobot_lang_nodes.robocasa.host import KitchenHost, KitchenSpec

REPORT_PERIOD_S = 30.0  # the real-time factor in the log


@dataclass(frozen=True)
class RoboCasaBridgeConfig(ExecutorParams):
    """Parameters of the robocasa_bridge node."""

    simulator: str = field(default='robocasa', metadata={
        'doc': 'robocasa: a RoboCasa kitchen (needs RoboCasa and its assets); robosuite: a '
               'stock robosuite scene with the same robot and cameras (offline); standin: '
               'the kinematic stand-in of RoboCasa\'s environment (no simulator).',
        'choices': SIMULATORS})
    task: str = field(default='PickPlaceCounterToSink', metadata={
        'doc': 'RoboCasa environment (task) name, e.g. CloseFridge, PickPlaceCounterToSink.'})
    split: str = field(default='pretrain', metadata={
        'doc': 'RoboCasa scene split, always passed explicitly.', 'choices': SPLITS})
    seed: int = field(default=0, metadata={
        'doc': 'Scene seed of the first kitchen; reset k uses seed + 1000 * k.'})
    robot: str = field(default='PandaOmron', metadata={'doc': 'Robot of the scene.'})
    cameras: tuple[str, ...] = field(default=layout.DEFAULT_CAMERAS, metadata={
        'doc': 'Views rendered and published on cameras/<name>/image_raw.'})
    image_size: int = field(default=256, metadata={
        'doc': 'Rendered width and height of each view (px).', 'range': (16, 1024)})
    ctrl_hz: float = field(default=20.0, metadata={
        'doc': 'Control rate: one action and one environment step per tick (Hz).',
        'range': (1.0, 200.0)})
    horizon: int = field(default=1_000_000, metadata={
        'doc': 'Environment horizon (steps); very long, so one kitchen persists. If the '
               'environment ends the episode anyway, it is reset and the event reported.',
        'range': (1, 1_000_000_000)})
    action_order: str = field(default='robocasa', metadata={
        'doc': 'Order of the 12-D actions the policy speaks: robocasa (convert_action, openpi '
               'checkpoints), lerobot (LeRobot RoboCasa datasets) or env (raw env.step). '
               'Chunks must name their columns in this order.',
        'choices': tuple(layout.ACTION_ORDERS)})
    real_time_factor: float = field(default=1.0, metadata={
        'doc': 'Sim seconds per wall second to aim for; 0 runs as fast as the CPU allows.',
        'range': (0.0, 100.0)})
    camera_hz: float = field(default=10.0, metadata={
        'doc': 'Image publish rate (sim Hz).', 'range': (0.1, 200.0)})
    reject_margin: float = field(default=0.5, metadata={
        'doc': 'Chunks with values further than this outside the action bounds are rejected '
               'as invalid; values inside the margin are clipped to the bounds.',
        'range': (0.0, 10.0)})
    default_task: str = field(default='', metadata={
        'doc': 'Task published on sim/task_description; empty = the episode\'s language from '
               'the scene\'s metadata (updated at every reset).'})


class RoboCasaBridgeNode(SimulatorBridge, Node):
    """ROS adapter for a KitchenHost and the core chunk executor."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._running = False
        self._control: ControlLoop | None = None
        super().__init__('robocasa_bridge')
        self.cfg = cfg = declare_config(self, RoboCasaBridgeConfig)
        reject_unknown_parameters(self)
        spec = KitchenSpec(simulator=cfg.simulator, task=cfg.task, split=cfg.split,
                           seed=cfg.seed, robot=cfg.robot, cameras=tuple(cfg.cameras),
                           image_size=cfg.image_size, control_hz=cfg.ctrl_hz,
                           horizon=cfg.horizon, action_order=cfg.action_order)
        self.get_logger().info(f'creating the {cfg.simulator} scene {cfg.task!r} (split '
                               f'{cfg.split}, seed {cfg.seed}, {cfg.image_size} px views)')
        # robosuite makes its offscreen GL context when the environment is built, and the
        # context only renders on that thread: the loop thread builds the host and keeps it.
        self._host_built = threading.Event()
        self._start_loop = threading.Event()
        self._host_error: BaseException | None = None
        self._running = True
        self._thread = threading.Thread(target=self._run, args=(spec,), name='robocasa-loop',
                                        daemon=True)
        self._thread.start()
        self._host_built.wait()
        if self._host_error is not None:
            # SimulatorUnavailable (an ImportError) ends the process once with its message
            # (exit 2 in the runner); the bring-up does not restart a node that cannot start.
            self._thread.join()
            raise self._host_error
        self.chunk_executor = make_chunk_executor(cfg, self.host.action_names, cfg.ctrl_hz,
                                            self.host.lower, self.host.upper,
                                            margin=cfg.reject_margin)
        self._goal_text = ''
        self._context_revision = 0
        self._have_context = False
        self.loop_errors = LoopErrors()

        self._init_bridge()
        self._joint_pub = self.create_publisher(JointState, 'joint_states', qos.SENSOR)
        self._state_pub = self.create_publisher(JointState, 'robot_state', qos.SENSOR)
        self._image_pubs = {c: self.create_publisher(Image, f'cameras/{c}/image_raw', qos.SENSOR)
                            for c in cfg.cameras}
        self._info_pubs = {c: self.create_publisher(CameraInfo, f'cameras/{c}/camera_info',
                                                    qos.SENSOR) for c in cfg.cameras}
        self._outcome_pub = self.create_publisher(TaskOutcome, 'task_outcome', qos.LATCHED)
        self._task_desc_pub = self.create_publisher(String, 'sim/task_description', qos.LATCHED)
        self._publish_task_description()
        self.diagnostics = DiagnosticsPublisher(self, 'robocasa simulation loop',
                                                self._diagnostic_status)
        self._control = self._make_control_loop(
            {'camera': cfg.camera_hz, 'status': cfg.status_hz}, self._report_real_time_factor,
            REPORT_PERIOD_S)
        self._start_loop.set()
        self.get_logger().info(
            f'robocasa_bridge ready: {cfg.simulator} {cfg.task!r}, episode language '
            f'{self.host.language!r}, ctrl_hz={cfg.ctrl_hz}, actions in {cfg.action_order} '
            f'order {list(self.host.action_names)}, cameras {list(cfg.cameras)}')

    # --- inputs -------------------------------------------------------------------------
    # A kitchen is rebuilt on reset (RoboCasa compiles a new model): allow for it.
    RESET_TIMEOUT_S = 120.0

    def _sim_time(self) -> float:
        return self.host.sim_time

    def _reset_reply(self) -> str:
        return f'kitchen reset with seed {self.host.seed}: {self.host.language!r}'

    def _on_task(self, msg: String) -> None:
        with self._lock:
            if not self._have_context:  # without a planner the operator's task is the goal
                self._goal_text = msg.data.strip()

    def _on_context(self, msg: LanguageContext) -> None:
        self.chunk_executor.set_revision(int(msg.revision), int(msg.flush_revision) or None)
        with self._lock:
            self._have_context = True
            self._context_revision = int(msg.revision)
            self._goal_text = msg.task.strip()

    # --- the simulation thread ------------------------------------------------------------
    def _run(self, spec: KitchenSpec) -> None:
        try:
            self.host = KitchenHost(spec, factory(spec.simulator), reseed_rng)
        except BaseException as exc:  # noqa: BLE001 - re-raised by __init__ on its thread
            self._host_error = exc
            return
        finally:
            self._host_built.set()
        self._start_loop.wait()
        if not self._running:  # the node failed to start after the host was built
            self.host.close()
            return
        self._loop()

    def _loop(self) -> None:
        try:
            with self._outputs:
                self._publish_all(self.host.sim_time, images=True)
            self._control.run()
        finally:
            self.host.close()

    def _cycle(self) -> None:
        """One control period: the action due now and one environment step."""
        self._maybe_reset()
        host = self.host
        action = self.chunk_executor.tick(host.sim_time)
        if host.step(action):
            self.get_logger().warning(
                f'the environment ended the episode (horizon {self.cfg.horizon}); the kitchen '
                f'was reset with seed {host.seed} ({host.terminations} so far)')
            self._publish_task_description()

    def _publish_outputs(self, due: Outputs) -> None:
        self._publish_all(self.host.sim_time, images='camera' in due, status='status' in due,
                          refill=due.refill)

    def _report_real_time_factor(self, rtf: float) -> None:
        self.get_logger().info(
            f'real-time factor {rtf:.2f} (environment step {self.host.times.median_ms():.0f} '
            f'ms median, {len(self.cfg.cameras)} views at {self.cfg.image_size} px)')

    def real_time_factor(self) -> float:
        """Simulated seconds per wall second since the loop started."""
        return self._control.real_time_factor() if self._control is not None else 0.0

    def _hold_step(self) -> None:
        self.host.step(None)  # time goes on, holding still

    def _maybe_reset(self) -> None:
        request = self._take_reset_request()
        if request is None:
            return
        self.chunk_executor.clear()
        try:
            seed = self.host.reset()
        finally:
            request.set()
        self.get_logger().info(f'kitchen reset #{self.host.reset_count}, seed {seed}: '
                               f'{self.host.language!r}')
        self._publish_task_description()
        self._publish_all(self.host.sim_time, images=True)

    # --- outputs ------------------------------------------------------------------------
    def _publish_task_description(self) -> None:
        self._task_desc_pub.publish(String(data=self.cfg.default_task or self.host.language))

    def _publish_all(self, now: float, *, images: bool = False, status: bool = True,
                     refill: bool = False) -> None:
        self._publish_clock(now)
        joints = JointState(name=list(self.host.joint_names()),
                            position=self.host.joint_positions().tolist())
        convert.s_to_stamp(now, joints.header.stamp)
        self._joint_pub.publish(joints)
        state = JointState(name=list(layout.STATE_NAMES), position=self.host.state().tolist())
        convert.s_to_stamp(now, state.header.stamp)
        state.header.frame_id = 'base_link'
        self._state_pub.publish(state)
        if images:
            self._publish_images(now)
        if status or refill:
            self._publish_status(now)
        if status:
            self._publish_outcome(now)

    def _publish_images(self, now: float) -> None:
        for cam, rgb in self.host.images().items():
            frame = f'{cam}_optical_frame'
            self._image_pubs[cam].publish(convert.rgb_to_image(rgb, now, frame))
            h, w = rgb.shape[:2]
            intr = camera_info.pinhole(w, h, self.host.camera_fovy(cam), camera_name=cam)
            self._info_pubs[cam].publish(convert.intrinsics_to_camera_info(intr, now, frame))

    def _publish_outcome(self, now: float) -> None:
        """The environment's own success check, for the scene's task.

        RoboCasa judges only the task its scene was built for; another task text is reported
        as a goal the simulator cannot judge (known_goal false).
        """
        with self._lock:
            goal, revision = self._goal_text, self._context_revision
        scene_task = self.cfg.default_task or self.host.language
        known = bool(goal) and _same_text(goal, scene_task)
        outcome = TaskOutcome(goal=goal, context_revision=revision, known_goal=known)
        if not goal:
            outcome.detail = f'no task yet; the scene\'s task is {scene_task!r}'
        elif not known:
            outcome.detail = (f'{self.cfg.simulator} judges only the scene\'s task '
                              f'{scene_task!r}')
        else:
            outcome.success = self.host.success()
            outcome.detail = f'{goal}: ' + ('done' if outcome.success else 'not yet')
        convert.s_to_stamp(now, outcome.header.stamp)
        self._outcome_pub.publish(outcome)

    def _diagnostic_status(self) -> tuple[str, str, dict]:
        return self._loop_diagnostics({
            'simulator': self.cfg.simulator, 'task': self.cfg.task,
            'language': self.host.language, 'seed': self.host.seed,
            'resets': self.host.reset_count, 'terminations': self.host.terminations,
            'step_ms_p50': round(self.host.times.median_ms(), 2),
            'real_time_factor': round(self.real_time_factor(), 3),
            'last_reject_reason': self.chunk_executor.status().last_reject_reason})

    def close(self) -> None:
        self._running = False
        if self._control is not None:
            self._control.stop()
        if hasattr(self, '_start_loop'):
            self._start_loop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)


def _same_text(a: str, b: str) -> bool:
    return ' '.join(a.lower().split()).rstrip('.') == ' '.join(b.lower().split()).rstrip('.')


def main(args: list[str] | None = None) -> int:
    return runner.run(RoboCasaBridgeNode, args, name='robocasa_bridge')


if __name__ == '__main__':
    raise SystemExit(main())

