"""`lerobot-lang console`: one interactive terminal to drive a running graph.

A plain line is an interjection; commands start with `/` (`/help`). Subtask, memory, plan,
speech, run mode and task outcomes are printed as they arrive, above the line being typed
(prompt_toolkit keeps that line intact). The console joins the ROS graph once and keeps its
publishers and service clients, so a command answers as fast as the graph does.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from lerobot_lang_nodes import dds

DISCOVERY_TIMEOUT_S = 10.0
VQA_TIMEOUT_S = 90.0  # pause + one generation with a model on a CPU
SERVICE_TIMEOUT_S = 5.0
TAKEOVER_TIMEOUT_S = 20.0  # the leader is driven to the arm's pose first (handover_timeout_s)

HELP = """\
  TEXT                    interjection (the planner re-plans and may answer by speech)
  /task TEXT              set the task
  /subtask TEXT           direct mode: TEXT is the active subtask, the task stays
  /pause, /resume         hold the robot / let chunks move it again
  /burst SECONDS          act for SECONDS, then pause (the executor's timed burst)
  /takeover, /t           a human takes the arm with the leader (the policy's queue dropped,
                          the leader driven to the arm's pose, then released to your hand)
  /handback, /b           hand the arm back to the policy (nothing computed before plays)
  /ask [CAMERA] QUESTION  visual question (pauses the robot), prints the answer
  /reset                  reset the simulated scene (clears the task)
  /status                 task, context, run mode, queue and the planner's counters
  /record start|stop      start / stop the recorder node's bag
  /help                   this text
  /quit                   leave (the graph keeps running; Ctrl-D too)"""


def add_arguments(_command: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--namespace', default='', help='namespace of the graph (default /)')
    parser.add_argument('--timeout', type=float, default=DISCOVERY_TIMEOUT_S,
                        help='seconds to wait for the planner at start (default %(default)s)')


class GraphLink:
    """The console's node: publishers, clients and subscriptions made once, spun in a thread."""

    def __init__(self, write: Callable[[str], None], namespace: str = '') -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
        from std_msgs.msg import Float64, String
        from std_srvs.srv import Trigger

        from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus, TaskOutcome
        from lerobot_lang_msgs.srv import AskVqa
        from lerobot_lang_nodes.cli.bringup import OutcomeAnnouncer
        from lerobot_lang_nodes.nodes import qos

        self._write = write
        self._rclpy = rclpy
        # Ctrl-C stays with the prompt (clears the line) instead of shutting rclpy down.
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        ns = '/' + namespace.strip('/') if namespace.strip('/') else ''
        self.node = rclpy.create_node(f'lerobot_lang_console_{os.getpid()}', namespace=ns)
        self._lock = threading.Lock()
        self.context: Any = None
        self.status: Any = None
        self.planner_diag: dict[str, str] = {}
        self.announcer = OutcomeAnnouncer(write)
        n = self.node
        self.pubs = {'task': n.create_publisher(String, 'task', qos.LATCHED),
                     'interjection': n.create_publisher(String, 'interjection', qos.COMMAND),
                     'burst': n.create_publisher(Float64, 'burst', qos.COMMAND)}
        self.clients = {name: n.create_client(Trigger, name)
                        for name in ('pause', 'resume', 'sim/reset', 'recorder/start',
                                     'recorder/stop', 'takeover', 'handback')}
        self.clients['vqa'] = n.create_client(AskVqa, 'vqa')
        self._msg = {'String': String, 'Float64': Float64, 'Trigger': Trigger, 'AskVqa': AskVqa}
        n.create_subscription(LanguageContext, 'language_context', self._on_context, qos.LATCHED)
        n.create_subscription(String, 'speech', lambda m: write(f'speech: {m.data}'),
                              qos.COMMAND)
        n.create_subscription(TaskOutcome, 'task_outcome', self.announcer.on_outcome,
                              qos.LATCHED)
        n.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        n.create_subscription(DiagnosticArray, 'diagnostics', self._on_diagnostics, qos.STATUS)
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(n)
        self._thread = threading.Thread(target=self._spin, name='console-ros', daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException
        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass

    # -- what arrives ------------------------------------------------------------------------

    def _on_context(self, msg: Any) -> None:
        with self._lock:
            prev, self.context = self.context, msg
        self.announcer.on_context(msg)
        for key in ('subtask', 'memory', 'plan'):
            value = getattr(msg, key)
            if value and (prev is None or getattr(prev, key) != value):
                self._write(f'{key}: {value}')

    def _on_status(self, msg: Any) -> None:
        with self._lock:
            prev, self.status = self.status, msg
        if prev is not None and prev.mode != msg.mode:
            self._write(f'mode: {msg.mode}')
        if prev is not None and prev.control_source != msg.control_source:
            self._write(f'control: {msg.control_source}')  # policy, human or none

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.split(':')[0].rsplit('/', 1)[-1] == 'planner':
                values = {kv.key: kv.value for kv in status.values}
                values['_message'] = status.message
                with self._lock:
                    self.planner_diag = values

    # -- what the commands use ---------------------------------------------------------------

    def wait_for_graph(self, timeout_s: float) -> bool:
        """Wait until the planner, the executor's services and its status are matched."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                have_status = self.status is not None
            if (have_status and self.pubs['interjection'].get_subscription_count() > 0
                    and all(self.clients[n].service_is_ready() for n in ('vqa', 'pause'))):
                return True
            time.sleep(0.05)
        return False

    def publish(self, topic: str, value: Any, timeout_s: float = 3.0) -> str:
        """Publish once a subscriber matched; '' or the error."""
        pub = self.pubs[topic]
        deadline = time.monotonic() + timeout_s
        while pub.get_subscription_count() == 0:
            if time.monotonic() > deadline:
                return f'nobody subscribes to {self.node.resolve_topic_name(topic)}'
            time.sleep(0.02)
        msg_type = self._msg['Float64' if topic == 'burst' else 'String']
        pub.publish(msg_type(data=value))
        return ''

    def call(self, name: str, request: Any = None, timeout_s: float = SERVICE_TIMEOUT_S
             ) -> tuple[Any, str]:
        """(response, '') or (None, error)."""
        client = self.clients[name]
        full = self.node.resolve_service_name(name)
        if not client.wait_for_service(timeout_sec=timeout_s):
            return None, f'service {full} is not available'
        if request is None:
            request = self._msg['Trigger'].Request()
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            return None, f'{full} did not answer within {timeout_s:.0f} s'
        return future.result(), ''

    def vqa_request(self, question: str, camera: str) -> Any:
        return self._msg['AskVqa'].Request(question=question, camera=camera)

    def close(self) -> None:
        # Stop the spin thread before the node goes: destroying a node that a thread is still
        # waiting on aborts the process in rcl.
        self._executor.shutdown(timeout_sec=10.0)
        self._thread.join(timeout=10.0)
        if not self._thread.is_alive():
            self.node.destroy_node()
        self._rclpy.try_shutdown()


class Console:
    """Parses one typed line and runs it against a GraphLink; output goes through ``write``."""

    def __init__(self, link: GraphLink, write: Callable[[str], None]) -> None:
        self.link = link
        self.write = write
        self.commands: dict[str, Callable[[str], None]] = {
            'task': self._task, 'subtask': self._subtask, 'pause': self._trigger('pause'),
            'resume': self._trigger('resume'), 'burst': self._burst, 'ask': self._ask,
            'reset': self._trigger('sim/reset'), 'status': self._status,
            'record': self._record, 'help': lambda _a: self.write(HELP),
            'takeover': self._trigger('takeover', TAKEOVER_TIMEOUT_S),
            'handback': self._trigger('handback')}
        self.commands['t'] = self.commands['takeover']
        self.commands['b'] = self.commands['handback']

    def execute(self, line: str) -> bool:
        """Run one line; False when the console should quit."""
        line = line.strip()
        if not line:
            return True
        if not line.startswith('/'):
            self._report(self.link.publish('interjection', line), f'interjection: {line}')
            return True
        name, _, rest = line[1:].partition(' ')
        name, rest = name.lower(), rest.strip()
        if name in ('quit', 'exit', 'q'):
            return False
        command = self.commands.get(name)
        if command is None:
            self.write(f'error: unknown command /{name}; commands: '
                       + ' '.join(f'/{c}' for c in [*self.commands, 'quit']))
            return True
        command(rest)
        return True

    def _report(self, error: str, done: str) -> None:
        self.write(f'error: {error}' if error else done)

    def _needs(self, rest: str, what: str) -> bool:
        if not rest:
            self.write(f'error: give {what}')
        return bool(rest)

    def _task(self, rest: str) -> None:
        if self._needs(rest, 'the task text: /task put the red cube in the bowl'):
            self._report(self.link.publish('task', rest), f'task sent: {rest}')

    def _subtask(self, rest: str) -> None:
        if self._needs(rest, 'the subtask text: /subtask open the gripper'):
            self._report(self.link.publish('task', f'direct: {rest}'), f'subtask sent: {rest}')

    def _trigger(self, name: str, timeout_s: float = SERVICE_TIMEOUT_S
                 ) -> Callable[[str], None]:
        def command(_rest: str) -> None:
            reply, error = self.link.call(name, timeout_s=timeout_s)
            if reply is None:
                self.write(f'error: {error}')
            else:
                self.write(f"{name}: {reply.message}" if reply.success else
                           f'error: {name}: {reply.message}')
        return command

    def _burst(self, rest: str) -> None:
        try:
            seconds = float(rest)
        except ValueError:
            self.write(f'error: /burst takes seconds, e.g. /burst 2.5 (got {rest!r})')
            return
        if not seconds > 0:
            self.write(f'error: /burst needs a duration > 0 s (got {seconds})')
            return
        self._report(self.link.publish('burst', seconds),
                     f'burst: acting for {seconds:g} s, then pausing')

    def _ask(self, rest: str) -> None:
        if not self._needs(rest, 'a question: /ask [camera] what is in the gripper?'):
            return
        camera, question = '', rest
        first, _, tail = rest.partition(' ')
        cameras = self._cameras()
        if tail and first in cameras:
            camera, question = first, tail.strip()
        reply, error = self.link.call('vqa', self.link.vqa_request(question, camera),
                                      timeout_s=VQA_TIMEOUT_S)
        if reply is None:
            self.write(f'error: {error}')
        elif not reply.success:
            self.write(f'error: {reply.message}')
        else:
            self.write(f'answer: {reply.answer}')

    def _cameras(self) -> set[str]:
        # The planner's cameras are what /vqa accepts; its topics show them.
        names = set()
        for topic, _types in self.link.node.get_topic_names_and_types():
            parts = topic.strip('/').split('/')
            if len(parts) >= 3 and parts[-1] == 'image_raw' and parts[-3] == 'cameras':
                names.add(parts[-2])
        return names

    def _status(self, _rest: str) -> None:
        link = self.link
        with link._lock:
            ctx, st, diag = link.context, link.status, dict(link.planner_diag)
        if ctx is None and st is None:
            self.write('error: no language_context or runtime_status received yet')
            return
        lines = []
        if ctx is not None:
            lines += [f'task:     {ctx.task or "-"}', f'subtask:  {ctx.subtask or "-"}',
                      f'memory:   {ctx.memory or "-"}', f'plan:     {ctx.plan or "-"}',
                      f'revision: {ctx.revision}']
        if st is not None:
            lines.append(f'mode:     {st.mode} ({st.control_source})  queue {st.queue_depth}  '
                         'dispatched '
                         f'{st.dispatched}  stale {st.discarded_stale}  invalid '
                         f'{st.rejected_invalid}  starved {st.starved_ticks}')
        if diag:
            def total(prefix: str) -> int:
                return sum(int(v) for k, v in diag.items()
                           if k.startswith(prefix) and v.lstrip('-').isdigit())
            lines.append(f"planner:  {diag.get('_message', '')}  repeats "
                         f"{diag.get('repeats', '0')} (total {diag.get('total_repeats', '0')})"
                         f"  empty {total('empty.')}  failures {total('failures.')}"
                         f"  timeouts {total('timeouts.')}")
        self.write('\n'.join(lines))

    def _record(self, rest: str) -> None:
        if rest not in ('start', 'stop'):
            self.write('error: /record start or /record stop')
            return
        self._trigger(f'recorder/{rest}')('')


def run(_command: str, args: argparse.Namespace) -> int:
    os.environ.update(dds.ros_environment())
    interactive = sys.stdin.isatty() and sys.stdout.isatty()

    def write(text: str) -> None:
        print(text, flush=True)

    link = GraphLink(write, args.namespace)
    try:
        if link.wait_for_graph(args.timeout):
            write(f"connected (ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')}, namespace "
                  f"{args.namespace or '/'}); a line is an interjection, /help lists commands")
        else:
            write(f'warning: planner or executor services not seen within {args.timeout:.0f} s '
                  f"in ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')}; is the graph running? "
                  '(/help)')
        console = Console(link, write)
        return _loop(console) if interactive else _loop_plain(console)
    finally:
        link.close()


def _loop(console: Console) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.patch_stdout import patch_stdout
    session: PromptSession = PromptSession('> ')
    # Output from the ROS thread goes above the prompt; the line being typed stays intact.
    with patch_stdout(raw=True):
        while True:
            try:
                line = session.prompt()
            except KeyboardInterrupt:
                continue  # Ctrl-C clears the line, as in a shell
            except EOFError:
                return 0
            try:
                if not console.execute(line):
                    return 0
            except KeyboardInterrupt:
                console.write('interrupted')


def _loop_plain(console: Console) -> int:
    """Lines from a pipe or file: the same commands, no line editing."""
    for line in sys.stdin:
        if not console.execute(line):
            break
    return 0


def main(argv: list[str] | None = None) -> int:
    from lerobot_lang_nodes.cli.main import run_one
    return run_one('console', sys.modules[__name__], argv)


if __name__ == '__main__':
    sys.exit(main())
