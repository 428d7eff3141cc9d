"""A peer process for the interface tests: publishes, serves AskVqa and RunTask, echoes chunks."""

from __future__ import annotations

import sys
import time

import rclpy
from rclpy.action import ActionServer
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from lerobot_lang_msgs.action import RunTask
from lerobot_lang_msgs.msg import ActionChunk, LanguageContext
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes.nodes import qos

JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']


class InterfacePeer(Node):
    """Exercises every interface of lerobot_lang_msgs from a separate process."""

    def __init__(self) -> None:
        super().__init__('interface_peer')
        group = ReentrantCallbackGroup()
        self._ctx_pub = self.create_publisher(LanguageContext, 'language_context', qos.LATCHED)
        self._chunk_pub = self.create_publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        self._echo_pub = self.create_publisher(ActionChunk, 'action_chunk_echo', qos.COMMAND)
        self.create_subscription(ActionChunk, 'action_chunk_in', self._echo_pub.publish,
                                 qos.COMMAND)
        self.create_service(AskVqa, 'vqa', self._on_vqa)
        ActionServer(self, RunTask, 'run_task', self._run_task, callback_group=group)
        ctx = LanguageContext(task='put the red cube in the bowl', subtask='reach the red cube',
                              memory='nothing done yet', plan='', revision=7,
                              source=LanguageContext.SOURCE_PLANNER)
        ctx.header.stamp = self.get_clock().now().to_msg()
        self._ctx_pub.publish(ctx)  # latched: a later subscriber still gets it
        self._seq = 0
        self.create_timer(0.1, self._publish_chunk)

    def _publish_chunk(self) -> None:
        horizon = 3
        msg = ActionChunk(context_revision=7, instruction='reach the red cube',
                          action_names=JOINTS, horizon=horizon, action_dim=len(JOINTS),
                          values=[0.01 * i for i in range(horizon * len(JOINTS))],
                          control_period_s=1.0 / 30.0, sequence=self._seq, backend='peer')
        msg.header.stamp = self.get_clock().now().to_msg()
        self._seq += 1
        self._chunk_pub.publish(msg)

    def _on_vqa(self, request: AskVqa.Request, response: AskVqa.Response) -> AskVqa.Response:
        if not request.question.strip():
            response.success = False
            response.message = 'empty question'
            return response
        response.success = True
        response.answer = f'you asked about {request.camera or "front"}: {request.question}'
        response.message = 'peer'
        return response

    def _run_task(self, goal_handle):
        subtasks = [f'step {i} of {goal_handle.request.task}' for i in range(3)]
        # Feedback is a volatile topic: publish only once both readers of the test (the
        # action client's own and the test's raw subscription) are matched, or early
        # messages are lost in discovery.
        deadline = time.monotonic() + 10.0
        while self.count_subscribers('run_task/_action/feedback') < 2 and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        for i, subtask in enumerate(subtasks):
            goal_handle.publish_feedback(RunTask.Feedback(
                subtask=subtask, memory=f'{i} steps done', progress=f'{i + 1}/3'))
        goal_handle.succeed()
        return RunTask.Result(success=True, message='done', subtasks=subtasks)


def main() -> None:
    rclpy.init(args=sys.argv)
    node = InterfacePeer()
    executor = MultiThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    main()
