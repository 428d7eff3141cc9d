"""What the robot's computer sees of a split graph, one JSON line per event on stdout.

Run inside the robot's network namespace (`ip netns exec ... python -m
lerobot_lang_nodes.remote_monitor`) by test/remote/test_two_hosts.py and bench/remote.py:
runtime_status, the chunks that crossed the link (with the newest joint state's stamp when
each arrived: its age on the robot's clock), joint states (5 Hz), the planner's language
context, task outcomes and the /diagnostics of the simulator and the policy. ``wall`` is
CLOCK_MONOTONIC, comparable with the caller's time.monotonic() on the same machine.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import ExternalShutdownException
from sensor_msgs.msg import JointState

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus, TaskOutcome
from lerobot_lang_nodes.nodes import convert, qos


def emit(kind: str, **values) -> None:
    sys.stdout.write(json.dumps({'k': kind, 'wall': time.monotonic(), **values}) + '\n')
    sys.stdout.flush()


def main() -> None:
    rclpy.init()
    node = rclpy.create_node('robot_monitor')
    last_joints = [0.0]
    robot_now = [0.0]  # the newest joint state's stamp

    def on_status(m: RuntimeStatus) -> None:
        emit('status', stamp=convert.stamp_to_s(m.header.stamp), mode=m.mode,
             dispatched=int(m.dispatched), starved=int(m.starved_ticks),
             queue=int(m.queue_depth), accepted=int(m.last_accepted_sequence),
             playing=int(m.last_chunk_sequence), stale=int(m.discarded_stale),
             reason=m.last_reject_reason)

    def on_chunk(m: ActionChunk) -> None:
        emit('chunk', seq=int(m.sequence), stamp=convert.stamp_to_s(m.header.stamp),
             robot_now=robot_now[0])

    def on_joints(m: JointState) -> None:
        robot_now[0] = convert.stamp_to_s(m.header.stamp)
        if time.monotonic() - last_joints[0] >= 0.2:
            last_joints[0] = time.monotonic()
            emit('joints', stamp=convert.stamp_to_s(m.header.stamp), pos=list(m.position))

    def on_context(m: LanguageContext) -> None:
        emit('context', revision=int(m.revision), subtask=m.subtask)

    def on_outcome(m: TaskOutcome) -> None:
        emit('outcome', stamp=convert.stamp_to_s(m.header.stamp), success=bool(m.success),
             goal=m.goal)

    def on_diagnostics(m: DiagnosticArray) -> None:
        for s in m.status:
            if s.name.startswith(('sim_bridge', 'policy')):
                emit('diag', name=s.name, level=int.from_bytes(s.level, 'little')
                     if isinstance(s.level, bytes) else int(s.level), message=s.message,
                     values={kv.key: kv.value for kv in s.values})

    node.create_subscription(RuntimeStatus, 'runtime_status', on_status, qos.STATUS)
    node.create_subscription(ActionChunk, 'action_chunk', on_chunk, qos.COMMAND)
    node.create_subscription(JointState, 'joint_states', on_joints, qos.SENSOR)
    node.create_subscription(LanguageContext, 'language_context', on_context, qos.LATCHED)
    node.create_subscription(TaskOutcome, 'task_outcome', on_outcome, qos.LATCHED)
    node.create_subscription(DiagnosticArray, 'diagnostics', on_diagnostics, qos.STATUS)
    signal.signal(signal.SIGINT, lambda *_: rclpy.try_shutdown())
    emit('ready')
    try:
        rclpy.spin(node)
    except ExternalShutdownException:
        pass
    finally:
        rclpy.try_shutdown()


if __name__ == '__main__':
    main()
