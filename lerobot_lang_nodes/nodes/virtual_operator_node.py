"""`virtual_operator` node: the scripted sim expert as a human operator for DAgger in simulation.

It watches the learned policy on the simulator's ground truth and, when the rules of
core/virtual_operator.py say the policy strays (no progress toward the current subtask's goal,
a follower far from the expert's own plan, a dropped cube), takes the arm through the takeover
path a human uses: the executor's ``takeover`` service, then ``leader/joint_states`` following
the expert's plan (its chunks played at the control rate, as a hand moving a leader arm
would), then ``handback`` once the subtask it corrected is done. The recorder and the export
see a human's correction (``control_source`` human, the ``intervention`` column).

Progress and drops are measured by sim/tasks.py (subtask_progress, cube_dropped); the expert's
current subtask follows the task on /language_context through the plan the scripted planner
follows (sim/tasks.py advance). The deviation is the largest arm-joint gap (the gripper
squeezes past contact, so it is left out) between the follower and the row of the expert's
plan due now; a plan is made from the follower's pose and kept until it has run out with the
follower within ``max_deviation_rad`` of it, or the subtask changes.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.virtual_operator import (
    HANDBACK, TAKEOVER, Observation, OperatorRules, VirtualOperator)
from lerobot_lang_nodes.nodes import qos, runner
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters

NODE_NAME = 'virtual_operator'
_RULES = OperatorRules()
# A runtime_status sent before the takeover was answered may still arrive after it: for this
# long (s) the arm counts as the operator's even while the status says otherwise.
STATUS_GRACE_S = 1.0
RETRY_S = 1.0  # after a refused takeover or hand-back


@dataclass(frozen=True)
class VirtualOperatorConfig:
    """Parameters of the virtual_operator node (the rules: core/virtual_operator.py)."""

    stall_s: float = field(default=_RULES.stall_s, metadata={
        'doc': 'take over when the policy has made no progress toward the current subtask\'s '
               'goal for this long (s; progress: see progress_epsilon)', 'range': (0.1, 600.0)})
    progress_epsilon: float = field(default=_RULES.progress_epsilon, metadata={
        'doc': 'progress is a drop of the subtask\'s measure by this much below its best: '
               'metres (reach: grasp point to cube; lift: height missing; move over: cube to '
               'bowl) or radians of the gripper (grasp, release)', 'range': (1e-5, 1.0)})
    max_deviation_rad: float = field(default=_RULES.max_deviation_rad, metadata={
        'doc': 'take over when the follower\'s largest arm-joint gap from the expert\'s plan '
               'exceeds this (rad) ...', 'range': (0.01, 6.3)})
    deviation_s: float = field(default=_RULES.deviation_s, metadata={
        'doc': '... for this long without a break (s)', 'range': (0.05, 600.0)})
    take_over_on_drop: bool = field(default=_RULES.take_over_on_drop, metadata={
        'doc': 'take over when a held cube leaves the gripper and lands on the table'})
    min_takeover_s: float = field(default=_RULES.min_takeover_s, metadata={
        'doc': 'hold the arm at least this long (s), even when the subtask is done sooner',
        'range': (0.0, 600.0)})
    cooldown_s: float = field(default=_RULES.cooldown_s, metadata={
        'doc': 'no takeover this soon after a hand-back (s): the policy gets its turn',
        'range': (0.0, 600.0)})
    plan_period_s: float = field(default=0.33, metadata={
        'doc': 'while it holds the arm, the expert plans a new chunk this often (s), each '
               'continuing the last one\'s command', 'range': (0.01, 10.0)})
    chunk_horizon: int = field(default=20, metadata={
        'doc': 'rows (control ticks) of each expert plan', 'range': (2, 1000)})
    ground_truth_topic: str = field(default='sim/ground_truth', metadata={
        'doc': 'the simulator\'s ground truth (JSON) the expert and the rules read'})
    joint_states_topic: str = field(default='joint_states', metadata={
        'doc': 'the follower\'s joint states'})
    leader_joint_states_topic: str = field(default='leader/joint_states', metadata={
        'doc': 'where the operator\'s commands go while it holds the arm (the executor\'s '
               'leader_joint_states_topic)'})
    takeover_service: str = field(default='takeover', metadata={
        'doc': 'the executor\'s takeover service (std_srvs/Trigger)'})
    handback_service: str = field(default='handback', metadata={
        'doc': 'the executor\'s hand-back service (std_srvs/Trigger)'})
    diagnostics_period_s: float = field(default=1.0, metadata={
        'doc': 'period of the counts on /diagnostics (s)', 'range': (0.05, 60.0)})

    def rules(self) -> OperatorRules:
        return OperatorRules(**{f.name: getattr(self, f.name) for f in fields(OperatorRules)})


class VirtualOperatorNode(Node):
    """Takes over from the policy with the scripted expert, through /takeover and /handback."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.cfg = cfg = declare_config(self, VirtualOperatorConfig)
        reject_unknown_parameters(self)
        from lerobot_lang_nodes.sim.expert import ExpertConfig, ScriptedExpert
        from lerobot_lang_nodes.sim.scene import JOINT_NAMES, SceneConfig, build_model
        self.joint_names = tuple(JOINT_NAMES)
        self.expert = ScriptedExpert(build_model(SceneConfig()),
                                     ExpertConfig(horizon=cfg.chunk_horizon))
        self.operator = VirtualOperator(cfg.rules())
        self._lock = threading.Lock()  # the inputs
        self._switching = threading.Lock()  # a tick against a service's answer
        self._gt: dict | None = None
        self._held_gt: dict | None = None  # the last ground truth with a cube held
        self._q: np.ndarray | None = None
        self._status: RuntimeStatus | None = None
        self._task = ''
        self._plan_task = ''  # the task self._steps is the plan of
        self._steps: list = []
        self._index = 0
        self._plan: tuple[float, np.ndarray, np.ndarray] | None = None  # t0, chunk, plain
        self._plan_subtask: str | None = None
        self._pending = ''
        self._retry_at = 0.0
        self._confirmed_at: float | None = None
        self.refusals = 0
        self.last_decision = ''
        self._period = 0.0
        self._timer = None
        self._leader = self.create_publisher(JointState, cfg.leader_joint_states_topic,
                                             qos.SENSOR)
        self.create_subscription(String, cfg.ground_truth_topic, self._on_truth, qos.LATCHED)
        self.create_subscription(JointState, cfg.joint_states_topic, self._on_joints, qos.SENSOR)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                 qos.LATCHED)
        group = ReentrantCallbackGroup()
        self._switch_clients = {
            TAKEOVER: self.create_client(Trigger, cfg.takeover_service, callback_group=group),
            HANDBACK: self.create_client(Trigger, cfg.handback_service, callback_group=group)}
        self._diagnostics = DiagnosticsPublisher(self, 'virtual operator', self._diag,
                                                 cfg.diagnostics_period_s)
        self.get_logger().info(f'virtual operator watching the policy: {cfg.rules()}')

    # --- inputs ---------------------------------------------------------------------------
    def _on_truth(self, msg: String) -> None:
        try:
            gt = json.loads(msg.data)
        except ValueError:
            return
        with self._lock:
            self._gt = gt

    def _on_joints(self, msg: JointState) -> None:
        index = {n: i for i, n in enumerate(msg.name)}
        if all(n in index for n in self.joint_names) and len(msg.name) == len(msg.position):
            with self._lock:
                self._q = np.array([msg.position[index[n]] for n in self.joint_names])

    def _on_context(self, msg: LanguageContext) -> None:
        with self._lock:
            self._task = msg.task

    def _on_status(self, msg: RuntimeStatus) -> None:
        with self._lock:
            self._status = msg
        period = float(msg.control_period_s)
        if period > 0 and abs(period - self._period) > 1e-9:  # tick at the control rate
            self._period = period
            if self._timer is not None:
                self.destroy_timer(self._timer)
            self._timer = self.create_timer(period, self._tick)

    # --- the loop -------------------------------------------------------------------------
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _tick(self) -> None:
        with self._switching:
            self._step()

    def _subtask(self, task: str, gt: dict) -> Any:
        """The expert's current subtask of ``task``: a Subtask, None when the task is done, ''
        when the expert cannot run it. The plan advances as the scripted planner's does (a
        step is done when the ground truth says so, a drop goes back): a stateless guess
        from one ground truth would read a grasp that is closing as a reach."""
        from lerobot_lang_nodes.sim.tasks import (advance, decompose, infer_subtask_index,
                                                  parse_subtask, parse_task)
        try:
            if task != self._plan_task:
                self._plan_task = task
                spec = parse_task(task) if task else None
                sub = None if spec or not task else parse_subtask(task)
                self._steps = decompose(spec) if spec else ([sub] if sub else [])
                self._index = (infer_subtask_index(self._steps, gt) if spec else 0)
            elif self._steps:
                self._index = advance(self._steps, self._index, gt)
        except (KeyError, ValueError):  # a cube this scene does not have
            self._steps = []
        if not self._steps:
            return ''
        return self._steps[self._index] if self._index < len(self._steps) else None

    def _step(self) -> None:
        from lerobot_lang_nodes.sim.tasks import Subtask, cube_dropped, subtask_progress
        now = self._now()
        with self._lock:
            gt, q, status, task = self._gt, self._q, self._status, self._task
        if gt is None or q is None or status is None:
            return
        hz = 1.0 / self._period
        if abs(self.expert.config.ctrl_hz - hz) > 1e-9:
            from dataclasses import replace
            self.expert.config = replace(self.expert.config, ctrl_hz=hz)
        sub = self._subtask(task, gt)
        text = sub.text if isinstance(sub, Subtask) else sub
        dropped = cube_dropped(self._held_gt, gt)
        held = self._held_gt['gripper'].get('holding') if self._held_gt else None
        if gt['gripper'].get('holding'):
            self._held_gt = gt
        elif dropped or (held and gt['objects'].get(f'{held}_cube', {}).get('in_bowl')):
            self._held_gt = None
        grace = self._confirmed_at is not None and now - self._confirmed_at < STATUS_GRACE_S
        holding = self.operator.holding
        obs = Observation(
            now_s=now, subtask=text,
            progress=subtask_progress(sub, gt) if isinstance(sub, Subtask) else None,
            deviation_rad=None if holding else self._deviation(now, q, gt, text),
            dropped=bool(dropped),
            policy_acting=(status.mode == RuntimeStatus.MODE_ACTION
                           and status.control_source == RuntimeStatus.CONTROL_POLICY),
            human_acting=status.mode == RuntimeStatus.MODE_TELEOP or (holding and grace))
        decision = self.operator.step(obs)
        if self.operator.holding and text:
            self._drive(now, q, text, gt)
        if decision is not None and not self._pending and now >= self._retry_at:
            self._ask(decision, now)

    def _deviation(self, now: float, q: np.ndarray, gt: dict,
                   subtask: str | None) -> float | None:
        """The follower's largest arm-joint gap from the expert's plan row due now."""
        if not subtask:
            self._plan = None
            return None
        if self._plan is not None and subtask == self._plan_subtask:
            t0, _chunk, plain = self._plan
            k = int(round((now - t0) / self._period))
            gap = float(np.max(np.abs(q[:5] - plain[min(max(k, 0), len(plain) - 1)][:5])))
            if k < len(plain) or gap > self.cfg.max_deviation_rad:
                return gap
        self._replan(now, q, subtask, gt, continuing=False)
        self._plan_subtask = subtask
        return 0.0

    def _replan(self, now: float, q: np.ndarray, subtask: str, gt: dict,
                continuing: bool) -> None:
        chunk = self.expert.act(subtask, q, gt, now_s=now if continuing else None)
        self._plan = (now, chunk, self.expert.last_plan)

    def _drive(self, now: float, q: np.ndarray, subtask: str, gt: dict) -> None:
        """Publish the expert's command due now as the leader's pose."""
        if self._plan is None or now - self._plan[0] >= self.cfg.plan_period_s:
            # Each chunk continues the last one's command (the expert's own smoothing); the
            # first of a takeover starts from the follower's pose, as the watching plans did.
            self._replan(now, q, subtask, gt, continuing=True)
        t0, chunk, _plain = self._plan
        row = chunk[min(max(int(round((now - t0) / self._period)), 0), len(chunk) - 1)]
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = list(self.joint_names)
        msg.position = [float(x) for x in row]
        self._leader.publish(msg)

    # --- the switches ---------------------------------------------------------------------
    def _ask(self, decision: Any, now: float) -> None:
        client = self._switch_clients[decision.action]
        if not client.service_is_ready():
            self._retry_at = now + RETRY_S
            return
        self._pending = decision.action
        self.last_decision = f'{decision.action} ({decision.reason})'
        self.get_logger().info(f'{decision.action}: {decision.reason}'
                               + (f' [{decision.subtask}]' if decision.subtask else ''))
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda f: self._answered(f, decision))

    def _answered(self, future: Any, decision: Any) -> None:
        with self._switching:
            self._settle(future, decision)

    def _settle(self, future: Any, decision: Any) -> None:
        now = self._now()
        try:
            reply = future.result()
        except Exception as exc:  # noqa: BLE001  the service went away: try again later
            reply = Trigger.Response(success=False, message=str(exc))
        if not reply.success:
            self.refusals += 1
            self._retry_at = now + RETRY_S
            self.get_logger().warning(f'{decision.action} refused: {reply.message}')
        elif decision.action == TAKEOVER:
            self._plan = None
            self._plan_subtask = None
            self._confirmed_at = now
            self.operator.took_over(now, decision.reason, decision.subtask)
        else:
            self._plan = None
            self.operator.handed_back(now)
        self._pending = ''
        self._diagnostics.publish_now()

    def _diag(self) -> tuple[str, str, dict[str, Any]]:
        counts = self.operator.counts
        values: dict[str, Any] = {f'takeovers_{r}': n for r, n in counts.takeovers.items()}
        values.update(takeovers=counts.total_takeovers, handbacks=counts.handbacks,
                      intervention_s=round(counts.intervention_s, 3),
                      holding=self.operator.holding, reason=self.operator.reason,
                      corrected_subtask=self.operator.corrected or '',
                      refusals=self.refusals, last_decision=self.last_decision)
        message = (f'holding the arm ({self.operator.reason}: {self.operator.corrected})'
                   if self.operator.holding else 'watching the policy')
        return 'ok', message, values


def main(args: list[str] | None = None) -> int:
    return runner.run(VirtualOperatorNode, args, name=NODE_NAME)


if __name__ == '__main__':
    raise SystemExit(main())
