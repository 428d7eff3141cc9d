"""`lerobot-lang sim` / `real`: start a node graph, one process per node, and supervise it."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lerobot_lang_nodes import dds, graph
from lerobot_lang_nodes.procs import kill_with_stacks

DEFAULT_SIM_TASK = 'put the red cube in the bowl'
STOP_TIMEOUT_S = 10.0


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    if command == 'real':
        parser.add_argument('robot_yaml', type=Path,
                            help='robot YAML: port, calibration id, cameras, safety limits')
    parser.add_argument('--params-file', type=Path, default=None,
                        help='ros__parameters YAML for every node (default: the shipped '
                             f'config/{graph.PARAMS_FILES.get(command, "")})')
    parser.add_argument('--task', default=DEFAULT_SIM_TASK if command == 'sim' else '',
                        help='task to start with (empty: wait for /task); default %(default)r')
    parser.add_argument('--no-viewer', action='store_true', help='do not start the live view')
    parser.add_argument('--composed', action='store_true',
                        help='run planner and policy in one process (`planner_policy`), so a '
                             'hierarchical checkpoint named by both is loaded once')
    models = parser.add_argument_group(
        'models', 'point the nodes at learned models (overrides the parameters file)')
    models.add_argument('--policy-path', default=None, metavar='DIR',
                        help='LeRobot checkpoint (pretrained_model) directory for the policy; '
                             'selects the `lerobot` backend unless --policy-backend is given')
    models.add_argument('--policy-backend', default=None,
                        help='policy backend (scripted, lerobot, hierarchical)')
    models.add_argument('--planner-model', default=None, metavar='PATH',
                        help='Hugging Face model directory (or .gguf file) for the planner; '
                             'selects the `transformers` backend unless --planner-backend is '
                             'given')
    models.add_argument('--planner-backend', default=None,
                        help='planner backend (scripted, transformers, hierarchical)')
    models.add_argument('--hierarchical', default=None, metavar='DIR',
                        help='one LeRobot checkpoint with a text head and an action head '
                             'serves both planner and policy, loaded once (implies '
                             '--composed and the `hierarchical` backends)')
    models.add_argument('--device', default=None,
                        help='device of both model backends (auto, cpu, cuda, cuda:N)')
    parser.add_argument('--exit-on-success', action='store_true',
                        help='stop everything and exit 0 once the task is reported successful')
    parser.add_argument('--timeout', type=float, default=0.0,
                        help='stop and exit 1 after this many seconds (0 = run until Ctrl-C)')


class Supervised:
    """A node process whose output is printed line by line with a `[name]` prefix."""

    def __init__(self, spec: graph.NodeSpec, argv: list[str], env: dict[str, str]) -> None:
        self.spec = spec
        # Own session: a terminal's Ctrl-C reaches only the supervisor, which forwards one
        # SIGINT; a second one could interrupt a node's shutdown (a driver dropping torque).
        env = {**env, graph.SUPERVISOR_PID_ENV: str(os.getpid())}  # see runner
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1, start_new_session=True)
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write(f'[{self.spec.name}] {line}')
            sys.stdout.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            print(f'[lerobot-lang] {self.spec.name} ignored SIGINT; killing pid {self.proc.pid} '
                  '(its thread stacks follow)', flush=True)
            kill_with_stacks(self.proc)
        self._thread.join(timeout=2.0)


def _node_specs(command: str, args: argparse.Namespace,
                cameras: tuple[str, ...]) -> list[graph.NodeSpec]:
    # The real graph has one camera node per camera of the robot YAML.
    specs = list(graph.real_specs(cameras) if command == 'real' else graph.GRAPHS[command])
    if getattr(args, 'composed', False) or getattr(args, 'hierarchical', None):
        specs = list(graph.composed(specs))
    if args.no_viewer:
        specs = [s for s in specs if s.name != 'viewer']
    return specs


def model_overrides(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """The planner/policy parameters the model options set ({} when none is given)."""
    out: dict[str, dict[str, object]] = {}
    policy_path = getattr(args, 'policy_path', None)
    planner_model = getattr(args, 'planner_model', None)
    if policy_path:
        out.setdefault('policy', {}).update(
            backend='lerobot', model_path=str(Path(policy_path).expanduser().resolve()))
    if getattr(args, 'policy_backend', None):
        out.setdefault('policy', {})['backend'] = args.policy_backend
    if planner_model:
        model = Path(planner_model).expanduser().resolve()
        planner = {'backend': 'transformers', 'direct_subtask': False}
        if model.suffix == '.gguf':
            planner.update(model_path=str(model.parent), gguf_file=model.name)
        else:
            planner['model_path'] = str(model)
        out.setdefault('planner', {}).update(planner)
    if getattr(args, 'planner_backend', None):
        out.setdefault('planner', {})['backend'] = args.planner_backend
    hierarchical = getattr(args, 'hierarchical', None)
    if hierarchical:
        model = str(Path(hierarchical).expanduser().resolve())
        out.setdefault('planner', {}).update(backend='hierarchical', model_path=model,
                                             direct_subtask=False)
        out.setdefault('policy', {}).update(backend='hierarchical', model_path=model)
    if getattr(args, 'device', None):
        for node in ('planner', 'policy'):
            out.setdefault(node, {})['device'] = args.device
    return out


def apply_overrides(params_file: Path, overrides: dict[str, dict[str, object]]) -> Path:
    """A temporary copy of ``params_file`` with ``overrides`` set (the file itself if none)."""
    if not overrides:
        return params_file
    import tempfile

    import yaml
    params = yaml.safe_load(params_file.read_text(encoding='utf-8')) or {}
    for node, values in overrides.items():
        params.setdefault(node, {}).setdefault('ros__parameters', {}).update(values)
    fd, name = tempfile.mkstemp(prefix='lerobot_lang_params_', suffix='.yaml')
    with open(fd, 'w', encoding='utf-8') as f:
        f.write(f'# {params_file} with the command line model options\n')
        yaml.safe_dump(params, f, sort_keys=False)
    return Path(name)


def run(command: str, args: argparse.Namespace) -> int:
    env = dds.ros_environment()
    env.setdefault('MUJOCO_GL', 'egl')
    env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    os.environ.update(env)
    params_file = args.params_file or graph.default_params_file(command)
    if not params_file.is_file():
        print(f'error: parameters file {params_file} does not exist', file=sys.stderr)
        return 2
    cameras: tuple[str, ...] = ()
    if command == 'real':
        from lerobot_lang_nodes.cli import real_config  # the hardware path adds this module
        try:
            params_file = real_config.params_file_from_robot_yaml(
                args.robot_yaml, params_file, overrides=model_overrides(args))
        except real_config.RobotConfigError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 2
        cameras = tuple(real_config.camera_names(args.robot_yaml))
    else:
        params_file = apply_overrides(params_file, model_overrides(args))
    print(f"[lerobot-lang] ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} "
          f"ROS_AUTOMATIC_DISCOVERY_RANGE={env['ROS_AUTOMATIC_DISCOVERY_RANGE']} "
          f'params={params_file}', flush=True)
    procs: list[Supervised] = []
    stopping = threading.Event()

    def on_signal(_sig, _frame) -> None:
        stopping.set()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        for spec in _node_specs(command, args, cameras):
            argv = [sys.executable, '-m', spec.module, *graph.ros_args(spec, params_file)]
            procs.append(Supervised(spec, argv, env))
        return _supervise(args, procs, stopping, _viewer_url(params_file))
    finally:
        for p in procs:
            p.stop()
        for p in procs:
            p.wait(STOP_TIMEOUT_S)
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print('[lerobot-lang] stopped', flush=True)


def _viewer_url(params_file: Path) -> str:
    import yaml
    with params_file.open() as f:
        params = (yaml.safe_load(f) or {}).get('viewer', {}).get('ros__parameters', {})
    host = params.get('bind_address', '127.0.0.1')
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{params.get('port', 8010)}/"


def _supervise(args: argparse.Namespace, procs: list[Supervised], stopping: threading.Event,
               viewer_url: str) -> int:
    import rclpy
    from std_msgs.msg import String

    from rclpy.signals import SignalHandlerOptions

    from lerobot_lang_msgs.msg import TaskOutcome
    from lerobot_lang_nodes.nodes import qos
    # Keep our SIGINT/SIGTERM handlers: rclpy's would shut the context down under the loop.
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node('lerobot_lang_bringup')
    succeeded = threading.Event()
    def on_outcome(msg: TaskOutcome) -> None:
        if msg.success and args.task and msg.goal:
            succeeded.set()

    node.create_subscription(TaskOutcome, 'task_outcome', on_outcome, qos.LATCHED)
    task_pub = node.create_publisher(String, 'task', qos.LATCHED)
    task_sent = not args.task
    viewer_url_printed = False
    started = time.monotonic()
    try:
        while not stopping.is_set():
            rclpy.spin_once(node, timeout_sec=0.1)
            for p in procs:
                code = p.proc.poll()
                if code is not None and p.spec.required:
                    print(f'[lerobot-lang] required node {p.spec.name} exited with code {code};'
                          ' stopping the graph', flush=True)
                    return 1
            if not task_sent and task_pub.get_subscription_count() > 0:
                task_pub.publish(String(data=args.task))
                print(f'[lerobot-lang] task: {args.task}', flush=True)
                task_sent = True
            if not viewer_url_printed and 'viewer' in node.get_node_names():
                print(f'[lerobot-lang] live view: {viewer_url}', flush=True)
                viewer_url_printed = True
            if args.exit_on_success and succeeded.is_set():
                print('[lerobot-lang] task succeeded', flush=True)
                return 0
            if args.timeout and time.monotonic() - started > args.timeout:
                print(f'[lerobot-lang] timeout after {args.timeout:.0f} s', flush=True)
                return 1
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
