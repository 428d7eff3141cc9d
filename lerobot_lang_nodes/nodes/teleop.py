"""What every arm-executing node (sim_bridge, so101_driver) adds for a human in the loop.

The leader arm's joint states feed the executor (run mode ``teleop``, core/teleop.py), and two
services switch who commands the arm: ``takeover`` (policy -> human, core/takeover.py: the
queue is dropped, the leader is driven to the follower's pose through the leader node's
``hold_pose`` when there is one, then released, and the executor tracks it) and ``handback``
(human -> policy: nothing computed before is played). Both are std_srvs/Trigger; the node
publishes its runtime_status at once after each switch (the recording keeps the switch time).

The services and the leader clients run in their own re-entrant callback group: a takeover
waits for the leader node's answers and the leader's pose while the node keeps spinning.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_nodes.core.takeover import TakeoverPorts, run_handback, run_takeover
from lerobot_lang_nodes.nodes import qos

SERVICE_WAIT_S = 0.5  # a leader node that is not there answers no hold_pose: slide instead
CALL_TIMEOUT_S = 3.0


class TeleopPort:
    """Leader subscription and takeover/handback services of one executing node.

    ``now`` is the executor's clock, ``follower_pose`` the follower's present pose (action
    order), ``publish_status`` sends runtime_status at once; ``refusal`` says why motion is
    refused now ('' when it is not: the real arm's faults), ``on_teleop``/``on_handback``
    replace the executor calls where the node's host must know (the real driver).
    """

    def __init__(self, node: Any, cfg: Any, now: Callable[[], float],
                 follower_pose: Callable[[], np.ndarray | None],
                 publish_status: Callable[[], None],
                 refusal: Callable[[], str] = lambda: '',
                 on_teleop: Callable[[np.ndarray | None], None] | None = None,
                 on_handback: Callable[[], None] | None = None) -> None:
        self.node = node
        self.cfg = cfg
        self.executor = node.chunk_executor
        self._now = now
        self._follower_pose = follower_pose
        self._publish_status = publish_status
        self._refusal = refusal
        self._on_teleop = on_teleop or (lambda pose: self.executor.teleop(self._now(), pose))
        self._on_handback = on_handback or (lambda: self.executor.resume(self._now()))
        self._switch = threading.Lock()  # one switch at a time
        self._leader_pose: np.ndarray | None = None
        group = ReentrantCallbackGroup()
        node.create_subscription(JointState, cfg.leader_joint_states_topic, self._on_leader,
                                 qos.SENSOR)
        node.create_service(Trigger, 'takeover', self._on_takeover, callback_group=group)
        node.create_service(Trigger, 'handback', self._on_handback_srv, callback_group=group)
        self._hold_client = self._release_client = None
        if cfg.leader_node:
            self._hold_client = node.create_client(Trigger, f'{cfg.leader_node}/hold_pose',
                                                   callback_group=group)
            self._release_client = node.create_client(Trigger, f'{cfg.leader_node}/release',
                                                      callback_group=group)

    # --- inputs -------------------------------------------------------------------------
    def _on_leader(self, msg: JointState) -> None:
        names = list(msg.name)
        positions = list(msg.position)
        index = {n: i for i, n in enumerate(names)}
        action_names = self.executor.cfg.action_names
        if all(n in index for n in action_names) and len(names) == len(positions):
            self._leader_pose = np.array([positions[index[n]] for n in action_names])
        problem = self.executor.set_leader(names, positions, self._now())
        if problem:
            self.node.get_logger().warning(f'leader sample refused: {problem}',
                                           throttle_duration_sec=5.0)

    def _call(self, client: Any) -> str:
        """'' when the leader node's service answered success, else why not."""
        if client is None:
            return 'no leader node configured (leader_node empty)'
        if not client.wait_for_service(timeout_sec=SERVICE_WAIT_S):
            return f'{client.srv_name} not available'
        done = threading.Event()
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(CALL_TIMEOUT_S):
            return f'{client.srv_name} did not answer within {CALL_TIMEOUT_S:g} s'
        result = future.result()
        return '' if result.success else (result.message or 'refused')

    def _on_takeover(self, _req, response: Trigger.Response) -> Trigger.Response:
        refusal = self._refusal()
        if refusal:
            response.success, response.message = False, f'takeover refused: {refusal}'
            return response
        with self._switch:
            ports = TakeoverPorts(
                hold=lambda: (self.executor.pause(self._now()), self._publish_status()),
                follower_pose=self._follower_pose, leader_pose=lambda: self._leader_pose,
                teleop=self._on_teleop, handback=self._on_handback,
                drive_leader=(lambda: self._call(self._hold_client))
                if self._hold_client is not None else None,
                release_leader=lambda: self._call(self._release_client))
            result = run_takeover(ports, _wait, self.cfg.handover_tolerance_rad,
                                  self.cfg.handover_timeout_s)
            self._publish_status()
        self.node.get_logger().info(result.message)
        response.success, response.message = result.ok, result.message
        return response

    def _on_handback_srv(self, _req, response: Trigger.Response) -> Trigger.Response:
        refusal = self._refusal()
        if refusal:
            response.success, response.message = False, f'hand-back refused: {refusal}'
            return response
        with self._switch:
            ports = TakeoverPorts(hold=lambda: None, follower_pose=lambda: None,
                                  leader_pose=lambda: None, teleop=lambda _p: None,
                                  handback=self._on_handback)
            result = run_handback(ports)
            self._publish_status()
        self.node.get_logger().info(result.message)
        response.success, response.message = result.ok, result.message
        return response


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
