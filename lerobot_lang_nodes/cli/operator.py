"""Operator commands (task, run, interject, ask, pause, resume, burst, reset, status,
takeover, handback) without ros2cli.

Each starts, joins the graph, does one thing and exits; `lerobot-lang console` stays connected.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from lerobot_lang_nodes import dds

DISCOVERY_TIMEOUT_S = 10.0


class _Flag:
    """Set by the SIGINT handler: a plain attribute, as a handler must not take locks."""

    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def clear(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value


_interrupted = _Flag()

# Nodes that must have received a message before the command may exit.
CONSUMERS = {'task': {'planner', 'policy'}, 'interjection': {'planner'}}


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    if command in ('task', 'interject', 'say', 'run'):
        parser.add_argument('text', nargs='+', help='the text to send')
    if command in ('task', 'run'):
        parser.add_argument('--direct', action='store_true',
                            help='use the text as the subtask directly (no generation)')
    if command == 'run':
        parser.add_argument('--time-limit', type=float, default=0.0, metavar='S',
                            help='give up after S seconds of the graph clock (sim time in '
                                 'simulation); 0 = no limit (default)')
    if command == 'burst':
        parser.add_argument('seconds', type=float, help='how long to act before pausing (s)')
    if command == 'ask':
        parser.add_argument('question', nargs='+', help='the question')
        parser.add_argument('--camera', default='', help='camera to ground on (default view)')
    parser.add_argument('--timeout', type=float, default=DISCOVERY_TIMEOUT_S,
                        help='seconds to wait for the running graph (default %(default)s)')
    parser.add_argument('--namespace', default='', help='namespace of the graph (default /)')


def _graph_hint() -> str:
    return f"(is the graph running in ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')}?)"


def _topic(ns: str, name: str) -> str:
    return f"{ns.rstrip('/')}/{name}" if ns else name


def run(command: str, args: argparse.Namespace) -> int:
    os.environ.update(dds.ros_environment())
    import rclpy
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions
    # Ctrl-C only sets a flag that the waits check: the context stays up (so `run` can cancel
    # its goal), and no KeyboardInterrupt surfaces inside rclpy's C++ calls as another error.
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    _interrupted.clear()
    signal.signal(signal.SIGINT, lambda *_: _interrupted.set())
    node = Node('lerobot_lang_cli_' + command)
    try:
        code = _COMMANDS[command](node, args)
        return 130 if _interrupted.is_set() and code != 0 else code
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _spin_until(node, predicate, timeout_s: float) -> bool:
    """Spin until ``predicate()``; False at the deadline or on Ctrl-C."""
    import rclpy
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not _interrupted.is_set():
        if predicate():
            return True
        rclpy.spin_once(node, timeout_sec=0.05)
    return bool(predicate())


def _publish_string(node, topic: str, text: str, qos, timeout_s: float) -> int:
    from std_msgs.msg import String
    pub = node.create_publisher(String, topic, qos)
    full = node.resolve_topic_name(topic)

    def every_known_subscriber_matched() -> bool:
        # The process exits right after the acknowledgement, so a subscriber matched later
        # would never get the message: wait for the planner, and for every subscriber the
        # graph knows of (e.g. the simulator also listens to /task) to be matched.
        infos = node.get_subscriptions_info_by_topic(full)
        names = {i.node_name for i in infos}
        return (bool(infos) and pub.get_subscription_count() >= len(infos)
                and bool(names & CONSUMERS.get(topic.rsplit('/', 1)[-1], names)))

    if not _spin_until(node, every_known_subscriber_matched, timeout_s):
        if pub.get_subscription_count() == 0:
            print(f'error: nobody subscribes to {topic} {_graph_hint()}', file=sys.stderr)
            return 2
        print(f'warning: {topic}: the planner (or policy) was not seen; sending anyway',
              file=sys.stderr)
    pub.publish(String(data=text))
    if not pub.wait_for_all_acked(rclpy_duration(timeout_s)):
        print(f'error: {topic} message not acknowledged within {timeout_s} s', file=sys.stderr)
        return 2
    print(f'sent to {topic}: {text}')
    return 0


def rclpy_duration(seconds: float):
    from rclpy.duration import Duration
    return Duration(nanoseconds=int(seconds * 1e9))


def _cmd_task(node, args) -> int:
    from lerobot_lang_nodes.nodes import qos
    text = ' '.join(args.text)
    if args.direct:
        text = 'direct: ' + text
    return _publish_string(node, _topic(args.namespace, 'task'), text, qos.LATCHED, args.timeout)


def _cmd_interject(node, args) -> int:
    from lerobot_lang_nodes.nodes import qos
    # Latched, like /task: every subscription of the planner's (see nodes/commands.py) matches.
    return _publish_string(node, _topic(args.namespace, 'interjection'), ' '.join(args.text),
                           qos.LATCHED, args.timeout)


def _cmd_run(node, args) -> int:
    """RunTask: follow the task to its end, printing each new subtask; Ctrl-C cancels it."""
    from rclpy.action import ActionClient
    from lerobot_lang_msgs.action import RunTask
    name = _topic(args.namespace, 'run_task')
    client = ActionClient(node, RunTask, name)
    if not client.wait_for_server(timeout_sec=args.timeout):
        print(f'error: action {name} not available {_graph_hint()}', file=sys.stderr)
        return 2
    last = ['']

    def on_feedback(msg) -> None:
        fb = msg.feedback
        if fb.subtask != last[0]:
            last[0] = fb.subtask
            print(f'subtask: {fb.subtask}' + (f'  (memory: {fb.memory})' if fb.memory else ''),
                  flush=True)

    goal = RunTask.Goal(task=' '.join(args.text), direct_subtask=args.direct,
                        time_limit_s=args.time_limit)
    sent = client.send_goal_async(goal, feedback_callback=on_feedback)
    if not _spin_until(node, sent.done, args.timeout):
        print(f'error: {name} did not answer the goal', file=sys.stderr)
        return 2
    handle = sent.result()
    if not handle.accepted:
        print(f'error: {name} rejected the goal', file=sys.stderr)
        return 1
    print(f'running: {goal.task}', flush=True)
    result = handle.get_result_async()
    while not result.done() and not _interrupted.is_set():
        _spin_until(node, result.done, 1.0)
    if not result.done():  # Ctrl-C: cancel the goal, then report how it ended
        _interrupted.clear()
        cancel = handle.cancel_goal_async()
        _spin_until(node, cancel.done, args.timeout)
        _spin_until(node, result.done, args.timeout)
        print('cancelled', file=sys.stderr)
        return 130
    res = result.result().result
    print(f"{'succeeded' if res.success else 'failed'}: {res.message}")
    if res.subtasks:
        print('subtasks: ' + ' -> '.join(res.subtasks))
    return 0 if res.success else 1


def _call(node, srv_type, name: str, request, timeout_s: float):
    client = node.create_client(srv_type, name)
    if not client.wait_for_service(timeout_sec=timeout_s):
        print(f'error: service {name} not available {_graph_hint()}', file=sys.stderr)
        return None
    future = client.call_async(request)
    if not _spin_until(node, future.done, timeout_s + 30.0):
        print(f'error: {name} did not answer', file=sys.stderr)
        return None
    return future.result()


def _cmd_ask(node, args) -> int:
    from lerobot_lang_msgs.srv import AskVqa
    reply = _call(node, AskVqa, _topic(args.namespace, 'vqa'),
                  AskVqa.Request(question=' '.join(args.question), camera=args.camera),
                  args.timeout)
    if reply is None:
        return 2
    if not reply.success:
        print(f'error: {reply.message}', file=sys.stderr)
        return 1
    print(reply.answer)
    return 0


def _trigger(name: str):
    def command(node, args) -> int:
        from std_srvs.srv import Trigger
        reply = _call(node, Trigger, _topic(args.namespace, name), Trigger.Request(),
                      args.timeout)
        if reply is None:
            return 2
        print(reply.message)
        return 0 if reply.success else 1
    return command


def _cmd_burst(node, args) -> int:
    from std_msgs.msg import Float64

    from lerobot_lang_nodes.nodes import qos
    if not args.seconds > 0:
        print(f'error: burst needs seconds > 0, got {args.seconds}', file=sys.stderr)
        return 2
    topic = _topic(args.namespace, 'burst')
    pub = node.create_publisher(Float64, topic, qos.COMMAND)
    if not _spin_until(node, lambda: pub.get_subscription_count() > 0, args.timeout):
        print(f'error: nobody subscribes to {topic} {_graph_hint()}', file=sys.stderr)
        return 2
    pub.publish(Float64(data=args.seconds))
    if not pub.wait_for_all_acked(rclpy_duration(args.timeout)):
        print(f'error: {topic} message not acknowledged within {args.timeout} s',
              file=sys.stderr)
        return 2
    print(f'burst: acting for {args.seconds:g} s, then pausing')
    return 0


def _cmd_status(node, args) -> int:
    from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus
    from lerobot_lang_nodes.nodes import qos
    got: dict[str, object] = {}
    node.create_subscription(RuntimeStatus, _topic(args.namespace, 'runtime_status'),
                             lambda m: got.setdefault('status', m), qos.STATUS)
    node.create_subscription(LanguageContext, _topic(args.namespace, 'language_context'),
                             lambda m: got.setdefault('context', m), qos.LATCHED)
    _spin_until(node, lambda: len(got) == 2, args.timeout)
    if not got:
        print('error: no runtime_status or language_context received', file=sys.stderr)
        return 2
    ctx = got.get('context')
    if ctx is not None:
        print(f'task:     {ctx.task}\nsubtask:  {ctx.subtask}\nmemory:   {ctx.memory}\n'
              f'plan:     {ctx.plan}\nrevision: {ctx.revision}')
    st = got.get('status')
    if st is not None:
        print(f'mode:     {st.mode} (control: {st.control_source or "?"})\n'
              f'queue:    {st.queue_depth}\ndispatched: {st.dispatched} '
              f'stale: {st.discarded_stale} invalid: {st.rejected_invalid} '
              f'starved: {st.starved_ticks}')
    return 0


_COMMANDS = {'task': _cmd_task, 'run': _cmd_run, 'interject': _cmd_interject,
             'say': _cmd_interject, 'ask': _cmd_ask,
             'pause': _trigger('pause'), 'resume': _trigger('resume'), 'status': _cmd_status,
             'reset': _trigger('sim/reset'), 'burst': _cmd_burst,
             'takeover': _trigger('takeover'), 'handback': _trigger('handback')}
