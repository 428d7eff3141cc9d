"""`lerobot-lang sim` / `real` / `policy`: start a node graph, one process per node, and
supervise it. `policy` is the policy computer's part of a graph split over two computers
(`sim|real --without policy` on the robot's; README "Two computers").

Each run writes one session folder (`outputs/<date-time>/` or `--output-dir`): the annotated
live view as MP4 and a rolling latest.png, every node's log, the effective parameters, and with
`--record` the rosbag2 recording of the session.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lerobot_lang_nodes import dds, graph
from lerobot_lang_nodes.procs import kill_with_stacks

DEFAULT_SIM_TASK = 'put the red cube in the bowl'
# --task default in a kitchen: the episode's own language, once the bridge publishes it.
SCENE_TASK = '<scene>'
STOP_TIMEOUT_S = 10.0
OUTPUTS = Path('outputs')
_LIVE_VIEW = re.compile(r'live view: (http://\S+)')


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    if command == graph.POLICY_GRAPH:
        _add_policy_arguments(parser)
        return
    if command == 'real':
        parser.add_argument('robot_yaml', type=Path,
                            help='robot YAML: port, calibration id, cameras, safety limits')
    parser.add_argument('--params-file', type=Path, default=None,
                        help='ros__parameters YAML for every node (default: the shipped '
                             f'config/{graph.PARAMS_FILES.get(command, "")})')
    parser.add_argument('--task', default=None,
                        help='task to start with (empty: wait for /task); default: '
                             f'{DEFAULT_SIM_TASK!r} on the tabletop, the episode\'s language '
                             '(sim/task_description) in a kitchen, none on the real arm')
    if command == 'sim':
        parser.add_argument('--simulator', choices=sorted(graph.SIMULATORS), default='mujoco',
                            help='mujoco: the SO-101 tabletop (default); robocasa: RoboCasa '
                                 'kitchens with a PandaOmron (needs RoboCasa and its assets in '
                                 'the bridge\'s environment, scripts/setup.sh --robocasa); '
                                 'robosuite / standin: the same bridge on a stock robosuite '
                                 'scene / on the stand-in of RoboCasa\'s environment')
        parser.add_argument('--virtual-operator', action='store_true',
                            help='start the virtual operator (MuJoCo tabletop): the scripted '
                                 'expert takes over from a straying policy through /takeover, '
                                 'drives leader/joint_states and hands back once the subtask '
                                 'is done, recorded as a human\'s correction (DAgger)')
    if command in ('sim', 'real'):
        leader = parser.add_argument_group('leader arm (human in the loop)')
        leader.add_argument('--leader-port', default='', metavar='DEVICE',
                            help='serial device of an SO-101 leader arm: starts so101_leader; '
                                 '`lerobot-lang takeover` / `handback` (or the console keys) '
                                 'switch the arm between the policy and the leader')
        leader.add_argument('--leader-calibration', default='', metavar='ID_OR_JSON',
                            help="the leader's LeRobot calibration id, or its JSON file")
    parser.add_argument('--no-viewer', action='store_true', help='do not start the live view')
    parser.add_argument('--viewer-port', type=int, default=None, metavar='PORT',
                        help='live view port (default: the params file, 8010; the next free '
                             'port is used when it is taken)')
    parser.add_argument('--namespace', default='',
                        help='namespace of every node and topic, e.g. /robot1 (default /)')
    session = parser.add_argument_group('session folder')
    session.add_argument('--output-dir', type=Path, default=None, metavar='DIR',
                         help='session folder for the live view MP4, latest.png, node logs and '
                              'the bag (default: outputs/<date-time>/)')
    session.add_argument('--record', action='store_true',
                         help='record the session (rosbag2 MCAP, recorder node) into '
                              'DIR/bags')
    parser.add_argument('--dry-run', action='store_true',
                        help='run the policy on the live observations and publish, log and '
                             'show its chunks, but never move the arm (the executor holds): '
                             'the first thing to do with a new checkpoint')
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
    _add_split_arguments(parser)
    parser.add_argument('--exit-on-success', action='store_true',
                        help='stop everything and exit 0 once the task is reported successful')
    parser.add_argument('--timeout', type=float, default=0.0,
                        help='stop and exit 1 after this many seconds (0 = run until Ctrl-C)')


def _add_split_arguments(parser: argparse.ArgumentParser, policy_side: bool = False) -> None:
    split = parser.add_argument_group('two computers', 'a graph split between the robot\'s '
                                      'computer and a policy computer (README "Two computers")')
    if not policy_side:
        split.add_argument('--without', default='', metavar='NODES',
                           help='nodes another computer runs (`policy`, or `policy,planner`): '
                                'start them there with `lerobot-lang policy`')
        split.add_argument('--jpeg-quality', default='', metavar='Q',
                           help='JPEG quality of the compressed images (default 85)')
    split.add_argument('--compressed-images', choices=('auto', 'true', 'false'), default='auto',
                       help='images cross to the policy computer as JPEG '
                            '(<image topic>/compressed); auto: when the graph is split')


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--robot', choices=('sim', 'real'), default='sim',
                        help='the graph this computer joins: sim (follows /clock) or real')
    parser.add_argument('--planner', action='store_true',
                        help='run the planner here too (the robot side: --without '
                             'policy,planner)')
    parser.add_argument('--params-file', type=Path, default=None,
                        help='ros__parameters YAML (default: the shipped config of --robot)')
    parser.add_argument('--task', default=None, help='the planner\'s first task (--planner)')
    parser.add_argument('--namespace', default='', help='namespace of the robot\'s graph')
    parser.add_argument('--robot-yaml', type=Path, default=None,
                        help='real: the robot\'s YAML (a copy on this computer): the policy\'s '
                             'checkpoint, cameras and calibration as on one computer')
    parser.add_argument('--calibration', default='',
                        help='real: the driver\'s LeRobot calibration id or JSON path, copied '
                             'to this computer (converts the checkpoint\'s units)')
    session = parser.add_argument_group('session folder')
    session.add_argument('--output-dir', type=Path, default=None, metavar='DIR',
                         help='node logs and parameters (default: outputs/<date-time>/)')
    models = parser.add_argument_group('models')
    models.add_argument('--policy-path', default=None, metavar='DIR',
                        help='LeRobot checkpoint (pretrained_model) directory for the policy')
    models.add_argument('--policy-backend', default=None,
                        help='policy backend (scripted, lerobot, hierarchical)')
    models.add_argument('--planner-model', default=None, metavar='PATH',
                        help='the planner\'s model (with --planner)')
    models.add_argument('--planner-backend', default=None, help='planner backend')
    models.add_argument('--device', default=None,
                        help='device of the model backends (auto, cpu, cuda, cuda:N)')
    _add_split_arguments(parser, policy_side=True)
    parser.add_argument('--timeout', type=float, default=0.0,
                        help='stop and exit 1 after this many seconds (0 = run until Ctrl-C)')
    parser.set_defaults(no_viewer=True, viewer_port=None, record=False, dry_run=False,
                        composed=False, hierarchical=None, simulator=None,
                        exit_on_success=False, without='', jpeg_quality='')


def policy_plan(args: argparse.Namespace) -> tuple[list[graph.NodeSpec], dict, str]:
    """The policy computer's nodes and parameters, from the graph's one plan."""
    values = {'robot': args.robot, 'planner': str(bool(args.planner)).lower(),
              'namespace': args.namespace, 'task': args.task or '',
              'compressed_images': args.compressed_images, 'calibration': args.calibration,
              'params_file': str(args.params_file or ''),
              'robot_yaml': str(args.robot_yaml or '')}
    for key in ('policy_path', 'policy_backend', 'planner_model', 'planner_backend', 'device'):
        values[key] = getattr(args, key, None) or ''
    made = graph.plan(graph.POLICY_GRAPH, values)
    return list(made.specs), graph.plain_keys(made.params), made.source


def launch_values(command: str, args: argparse.Namespace) -> dict[str, str]:
    """The launch arguments (graph.LAUNCH_ARGUMENTS) that ``lerobot-lang sim|real`` options
    stand for: the CLI starts what `ros2 launch` with them starts."""
    def flag(value: object) -> str:
        return 'true' if value else 'false'
    v = {'params_file': str(args.params_file or ''), 'namespace': args.namespace,
         'viewer': flag(not args.no_viewer),
         'viewer_port': '' if args.viewer_port is None else str(args.viewer_port),
         'dry_run': flag(args.dry_run), 'composed': flag(args.composed),
         'record': flag(args.record), 'without': args.without,
         'compressed_images': args.compressed_images, 'jpeg_quality': args.jpeg_quality,
         'leader_port': args.leader_port, 'leader_calibration': args.leader_calibration}
    for key in ('policy_path', 'policy_backend', 'planner_model', 'planner_backend',
                'hierarchical', 'device'):
        v[key] = str(getattr(args, key, None) or '')
    if command == 'sim':
        v['simulator'] = args.simulator or 'mujoco'
        v['virtual_operator'] = flag(args.virtual_operator)
    else:
        v['robot_yaml'] = str(args.robot_yaml)
    planner_here = 'planner' not in graph.split_names(args.without)
    if args.task is not None:
        v['task'] = args.task
    elif command == 'sim' and v['simulator'] == 'mujoco' and planner_here:
        v['task'] = DEFAULT_SIM_TASK  # a kitchen's planner follows each episode's own
    return v


def plan(command: str, args: argparse.Namespace) -> graph.GraphPlan:
    """The nodes and parameters ``lerobot-lang sim|real`` starts: graph.plan of its options."""
    return graph.plan(command, launch_values(command, args))


class Supervised:
    """A node process whose output is printed line by line with a `[name]` prefix."""

    def __init__(self, spec: graph.NodeSpec, argv: list[str], env: dict[str, str],
                 log_dir: Path | None = None, on_line=None) -> None:
        self.spec = spec
        self._log = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._log = (log_dir / f'{spec.name}.log').open('a', encoding='utf-8', buffering=1)
        self._on_line = on_line
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
            if self._log is not None:
                self._log.write(line)
            if self._on_line is not None:
                self._on_line(self.spec.name, line)
        if self._log is not None:
            self._log.close()

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


def session_dir(args: argparse.Namespace) -> Path:
    """The session folder of this run (created)."""
    folder = args.output_dir or OUTPUTS / datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')
    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def session_params(params_file: Path | dict, folder: Path, args: argparse.Namespace,
                   specs: list[graph.NodeSpec], source: str = '') -> Path:
    """folder/params.yaml: ``params_file`` (or parameters from ``source``) plus the session
    sinks, keys valid in any namespace: the only parameters file a run writes."""
    import yaml
    if isinstance(params_file, dict):
        params = params_file
    else:
        params = yaml.safe_load(params_file.read_text(encoding='utf-8')) or {}
        source = source or str(params_file)
    names = {n for s in specs for n in (s.hosts or (s.name,))}
    if 'viewer' in names:
        viewer = params.setdefault('viewer', {}).setdefault('ros__parameters', {})
        viewer.setdefault('mp4_path', str(folder / 'live_view.mp4'))
        viewer.setdefault('latest_png_path', str(folder / 'latest.png'))
        if args.viewer_port is not None:
            viewer['port'] = args.viewer_port
    if 'planner' in names:  # a planner restarted in this session resumes its task
        planner = params.setdefault('planner', {}).setdefault('ros__parameters', {})
        planner.setdefault('state_file', str(folder / 'planner_state.json'))
    if 'recorder' in names:
        recorder = params.setdefault('recorder', {}).setdefault('ros__parameters', {})
        recorder['output_dir'] = str(folder / 'bags')
        sim_time = any(s.use_sim_time for s in specs)
        recorder.setdefault('use_sim_time', sim_time)
        cameras = params.get('viewer', {}).get('ros__parameters', {}).get('cameras')
        if cameras:
            recorder.setdefault('cameras', cameras)
    out = folder / 'params.yaml'
    with out.open('w', encoding='utf-8') as f:
        f.write(f'# {source} with the session settings; keys match in any namespace\n')
        yaml.dump(graph.namespaced(params), f, Dumper=graph.NoAliasDumper, sort_keys=False)
    return out


def run(command: str, args: argparse.Namespace) -> int:
    side = 'policy' if command == graph.POLICY_GRAPH else 'robot' if args.without else ''
    env = dds.ros_environment(side=side)
    env.setdefault('MUJOCO_GL', 'egl')
    env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    os.environ.update(env)
    if command == graph.POLICY_GRAPH:
        try:
            specs, params, source = policy_plan(args)
        except (ValueError, FileNotFoundError) as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 2
        waits = 'planner' in {s.name for s in specs} and not args.task
        return _start(args, env, specs, params, source, waits)
    try:
        made = plan(command, args)
    except (ValueError, FileNotFoundError) as exc:  # a robot YAML's refusal is a ValueError
        print(f'error: {exc}', file=sys.stderr)
        return 2
    for spec in made.specs:
        if spec.environment:
            try:
                graph.environment_prefix(spec.environment)
            except FileNotFoundError as exc:
                print(f'error: {exc}', file=sys.stderr)
                return 2
    planner = made.params.get('planner', {}).get('ros__parameters', {})
    here = {n for s in made.specs for n in (s.hosts or (s.name,))}
    waits = 'planner' in here and not (planner.get('task') or planner.get('scene_task_topic'))
    return _start(args, env, list(made.specs), made.params, made.source, waits)


def _start(args: argparse.Namespace, env: dict[str, str], specs: list[graph.NodeSpec],
           params: dict, source: str, waits_for_task: bool) -> int:
    """Write the session folder, start ``specs`` and supervise them until the end.

    The first task is the planner's ``task`` parameter, as under `ros2 launch`;
    ``waits_for_task``: there is none, so say how to send one."""
    folder = session_dir(args)
    params_file = session_params(params, folder, args, specs, source)
    print(f"[lerobot-lang] ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} "
          f"ROS_AUTOMATIC_DISCOVERY_RANGE={env['ROS_AUTOMATIC_DISCOVERY_RANGE']} "
          f'params={params_file}', flush=True)
    print(f'[lerobot-lang] session folder: {folder}', flush=True)
    procs: list[Supervised] = []
    urls: list[str] = []

    def on_line(name: str, line: str) -> None:
        match = _LIVE_VIEW.search(line) if name == 'viewer' else None
        if match:
            urls.append(match.group(1))
    stopping = threading.Event()

    def on_signal(_sig, _frame) -> None:
        stopping.set()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        for spec in specs:
            node_env = env
            if spec.environment:  # a node in another virtual environment (RoboCasa bridge)
                prefix = graph.environment_prefix(spec.environment)
                node_env = {**env, 'AMENT_PREFIX_PATH': str(prefix)}
            argv = [graph.interpreter(spec), '-m', spec.module,
                    *graph.ros_args(spec, params_file)]
            if args.namespace:
                argv += ['-r', f"__ns:={'/' + args.namespace.strip('/')}"]
            procs.append(Supervised(spec, argv, node_env, folder / 'logs', on_line))
        return _supervise(args, procs, stopping, urls, waits_for_task)
    finally:
        for p in procs:
            p.stop()
        for p in procs:
            p.wait(STOP_TIMEOUT_S)
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        print(f'[lerobot-lang] session folder: {folder}', flush=True)
        print('[lerobot-lang] stopped', flush=True)


class OutcomeAnnouncer:
    """Prints task changes and each success once, with the time taken since the task began."""

    def __init__(self, write=print) -> None:
        self._write = write
        self._task = ''
        self._started = time.monotonic()
        self._announced: set[tuple[str, int]] = set()
        self.succeeded = False

    def on_context(self, msg) -> None:
        if msg.task != self._task:
            previous, self._task = self._task, msg.task
            self._started = time.monotonic()
            if msg.task:
                self._write(f'task: {msg.task}')
            elif previous:  # e.g. a scene reset: nothing runs until a new task is sent
                self._write('task cleared: send a new task')

    def on_outcome(self, msg) -> None:
        key = (msg.goal, int(msg.context_revision))
        if not msg.success or not msg.goal or key in self._announced:
            return
        self._announced.add(key)
        self.succeeded = True
        self._write(f'task succeeded: {msg.goal} ({msg.detail}) after '
                    f'{time.monotonic() - self._started:.1f} s')


def _supervise(args: argparse.Namespace, procs: list[Supervised], stopping: threading.Event,
               urls: list[str], waits_for_task: bool) -> int:
    import rclpy

    from rclpy.signals import SignalHandlerOptions

    from lerobot_lang_msgs.msg import LanguageContext, TaskOutcome
    from lerobot_lang_nodes.nodes import qos
    # Keep our SIGINT/SIGTERM handlers: rclpy's would shut the context down under the loop.
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node('lerobot_lang_bringup',
                             namespace='/' + args.namespace.strip('/') if args.namespace else '')
    announcer = OutcomeAnnouncer(lambda text: print(f'[lerobot-lang] {text}', flush=True))
    node.create_subscription(TaskOutcome, 'task_outcome', announcer.on_outcome, qos.LATCHED)
    node.create_subscription(LanguageContext, 'language_context', announcer.on_context,
                             qos.LATCHED)
    if waits_for_task:
        print('[lerobot-lang] no task given: send one with `lerobot-lang task TEXT` or type '
              '`/task TEXT` in `lerobot-lang console`', flush=True)
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
            if not viewer_url_printed and urls:
                print(f'[lerobot-lang] live view: {urls[0]}', flush=True)
                viewer_url_printed = True
            if args.exit_on_success and announcer.succeeded:
                print('[lerobot-lang] task succeeded', flush=True)
                return 0
            if args.timeout and time.monotonic() - started > args.timeout:
                print(f'[lerobot-lang] timeout after {args.timeout:.0f} s', flush=True)
                return 1
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
