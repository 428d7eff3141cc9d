"""The node graphs (sim, real), defined once for `lerobot-lang` and the launch files."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lerobot_lang_nodes import paths
from lerobot_lang_nodes.core.param_names import dotted


@dataclass(frozen=True)
class NodeSpec:
    """One node of a graph: its executable (= node name) and how it is started."""

    name: str                      # node name and console script / `ros2 run` executable
    module: str                    # `python -m` module with main()
    required: bool = True          # the bring-up stops everything when a required node dies
    use_sim_time: bool = False     # follow /clock (every node but the simulator in sim)
    remaps: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # Names of the nodes one process hosts (composed); empty: one node named `name`.
    hosts: tuple[str, ...] = ()
    # Console script when it differs from the node name (one `camera` script, many cameras).
    executable: str = ''
    # Another Python environment the node runs in ('' = this one); see interpreter().
    environment: str = ''

    @property
    def script(self) -> str:
        """The `ros2 run lerobot_lang_nodes <script>` executable of this node."""
        return self.executable or self.name


SIM = (
    NodeSpec('sim_bridge', 'lerobot_lang_nodes.nodes.sim_bridge_node'),
    NodeSpec('planner', 'lerobot_lang_nodes.nodes.planner_node', use_sim_time=True),
    NodeSpec('policy', 'lerobot_lang_nodes.nodes.policy_node', use_sim_time=True),
    NodeSpec('viewer', 'lerobot_lang_nodes.nodes.viewer_node', required=False,
             use_sim_time=True),
)

REAL = (
    NodeSpec('so101_driver', 'lerobot_lang_nodes.nodes.so101_driver_node'),
    NodeSpec('planner', 'lerobot_lang_nodes.nodes.planner_node'),
    NodeSpec('policy', 'lerobot_lang_nodes.nodes.policy_node'),
    NodeSpec('viewer', 'lerobot_lang_nodes.nodes.viewer_node', required=False),
)

# The RoboCasa kitchens: robosuite and RoboCasa pin an older MuJoCo than this environment's,
# so the bridge runs in its own virtual environment (scripts/setup.sh --robocasa) and talks to
# the rest over DDS. Its `simulator` parameter picks RoboCasa, stock robosuite or the stand-in.
ROBOCASA_BRIDGE = NodeSpec('robocasa_bridge', 'lerobot_lang_nodes.nodes.robocasa_bridge_node',
                           environment='robocasa')
ROBOCASA = (ROBOCASA_BRIDGE, *SIM[1:])
# `lerobot-lang sim --simulator X` / sim.launch.py simulator:=X -> (graph, bridge simulator).
SIMULATORS = {'mujoco': ('sim', ''), 'robocasa': ('robocasa', 'robocasa'),
              'robosuite': ('robocasa', 'robosuite'), 'standin': ('robocasa', 'standin')}
ROBOCASA_VENV_ENV = 'LEROBOT_LANG_ROBOCASA_VENV'

# The simulated graphs' camera list is set once, on the simulator: the nodes that look at
# its cameras follow it unless their own block names a list.
CAMERA_FOLLOWERS = ('planner', 'policy', 'viewer', 'recorder')


def fan_out_cameras(params: dict, nodes_of: str) -> None:
    """Give ``CAMERA_FOLLOWERS`` the simulator's `cameras` (its block's, else its default)
    where their blocks set none (``params``: plain node keys, changed in place)."""
    if nodes_of == 'sim':
        from lerobot_lang_nodes.core.images import SO101_CAMERAS as default
        bridge = 'sim_bridge'
    elif nodes_of == 'robocasa':
        from lerobot_lang_nodes.robocasa.layout import DEFAULT_CAMERAS as default
        bridge = ROBOCASA_BRIDGE.name
    else:
        return  # the real graph's list is the robot YAML's (real_config)
    cameras = list(params.get(bridge, {}).get('ros__parameters', {}).get('cameras', default))
    for node in CAMERA_FOLLOWERS:
        params.setdefault(node, {}).setdefault('ros__parameters', {}).setdefault(
            'cameras', list(cameras))

# The SO-101 leader arm (human in the loop): optional in the sim and real graphs; its death
# does not stop the graph (the follower holds on a silent leader).
LEADER = NodeSpec('so101_leader', 'lerobot_lang_nodes.nodes.so101_leader_node', required=False)


def leader_parameters(port: str, calibration: str = '') -> dict[str, dict[str, object]]:
    """so101_leader's parameters for a leader arm on ``port``; ``calibration`` is a LeRobot
    teleoperator id or the path of its JSON file (a value with / or ending in .json).

    The topics are relative, so a namespaced graph keeps its leader to itself: the leader
    publishes <ns>/leader/joint_states, which the executor tracks in teleop, and its hold_pose
    reads the follower's <ns>/joint_states.
    """
    leader: dict[str, object] = {'port': port, 'joint_states_topic': 'leader/joint_states',
                                 'follower_joint_states_topic': 'joint_states'}
    if calibration:
        is_path = '/' in calibration or calibration.endswith('.json')
        leader['calibration_path' if is_path else 'calibration_id'] = calibration
    return {LEADER.name: leader}


def environment_prefix(environment: str) -> Path:
    """The prefix (virtual environment) of a node's ``environment``.

    'robocasa': $LEROBOT_LANG_ROBOCASA_VENV, else .venv-robocasa next to this source tree
    (where scripts/setup.sh --robocasa builds it).
    """
    if environment != 'robocasa':
        raise ValueError(f'unknown node environment {environment!r}')
    venv = os.environ.get(ROBOCASA_VENV_ENV) or str(paths.source_root() / '.venv-robocasa')
    prefix = Path(venv).expanduser().resolve()
    if not (prefix / 'bin' / 'python').exists():
        raise FileNotFoundError(
            f'the RoboCasa bridge\'s environment {prefix} does not exist: build it with '
            f'scripts/setup.sh --robocasa (or point {ROBOCASA_VENV_ENV} at one)')
    return prefix


def interpreter(spec: NodeSpec) -> str:
    """The Python that runs ``spec`` (this one, or its environment's)."""
    import sys
    if not spec.environment:
        return sys.executable
    return str(environment_prefix(spec.environment) / 'bin' / 'python')


# Set by `lerobot-lang` in each node's environment: the node then stops when its supervisor
# dies (nodes/runner.py), so a killed bring-up never leaves nodes behind.
SUPERVISOR_PID_ENV = 'LEROBOT_LANG_SUPERVISOR_PID'

GRAPHS: dict[str, tuple[NodeSpec, ...]] = {'sim': SIM, 'real': REAL, 'robocasa': ROBOCASA}

# The planner and the policy in one process, so a hierarchical checkpoint is loaded once.
COMPOSED_NAME = 'planner_policy'
COMPOSED_MODULE = 'lerobot_lang_nodes.nodes.composed_node'
COMPOSED_HOSTS = ('planner', 'policy')


def composed(specs: tuple[NodeSpec, ...] | list[NodeSpec]) -> tuple[NodeSpec, ...]:
    """``specs`` with planner and policy replaced by one `planner_policy` process.

    It takes the planner's place in the start order and keeps its sim time setting.
    """
    hosted = [s for s in specs if s.name in COMPOSED_HOSTS]
    if [s.name for s in hosted] != list(COMPOSED_HOSTS):
        raise ValueError(f'composing needs nodes {list(COMPOSED_HOSTS)} in the graph; it has '
                         f'{[s.name for s in specs]}')
    if any(s.remaps for s in hosted):  # one process has one set of remaps
        raise ValueError('planner and policy have remaps; they cannot share one process')
    spec = NodeSpec(COMPOSED_NAME, COMPOSED_MODULE, use_sim_time=hosted[0].use_sim_time,
                    hosts=COMPOSED_HOSTS)
    out: list[NodeSpec] = []
    for s in specs:
        if s.name == COMPOSED_HOSTS[0]:
            out.append(spec)
        elif s.name not in COMPOSED_HOSTS:
            out.append(s)
    return tuple(out)


CAMERA_TOPICS = ('image_raw', 'camera_info', 'image_raw/compressed')


def camera_spec(camera: str) -> NodeSpec:
    """The `camera` node of one real camera: node `<camera>_camera`, cameras/<camera>/ topics."""
    return NodeSpec(f'{camera}_camera', 'lerobot_lang_nodes.nodes.camera_node',
                    executable='camera',
                    remaps=tuple((t, f'cameras/{camera}/{t}') for t in CAMERA_TOPICS))


def real_specs(cameras: tuple[str, ...] | list[str] = ()) -> tuple[NodeSpec, ...]:
    """The REAL graph plus one camera node per configured camera (before the planner)."""
    return (REAL[0], *(camera_spec(c) for c in cameras), *REAL[1:])


PARAMS_FILES = {'sim': 'sim.yaml', 'real': 'real.yaml', 'robocasa': 'robocasa.yaml'}
# The node of each graph that executes chunks (and so owns the dry_run parameter).
EXECUTORS = {'sim': SIM[0].name, 'real': REAL[0].name, 'robocasa': ROBOCASA_BRIDGE.name}


def dry_run_overrides(graph_name: str) -> dict[str, dict[str, object]]:
    """The executor parameters of a dry run: chunks are played, nothing moves."""
    return {EXECUTORS[graph_name]: {'dry_run': True}}


def default_params_file(graph: str) -> Path:
    """The parameters YAML of a graph shipped in config/."""
    return paths.config_path(PARAMS_FILES[graph])


def ros_args(spec: NodeSpec, params_file: Path | None) -> list[str]:
    """`--ros-args` for one node of a graph (the launch files build the same from a NodeSpec)."""
    # A composed process keeps its nodes' own names: a global __node remap would rename all.
    args = ['--ros-args'] if spec.hosts else ['--ros-args', '-r', f'__node:={spec.name}']
    if params_file is not None:
        args += ['--params-file', str(params_file)]
    if spec.use_sim_time:
        args += ['-p', 'use_sim_time:=true']
    for src, dst in spec.remaps:
        args += ['-r', f'{src}:={dst}']
    return args


def namespaced(params: dict) -> dict:
    """A params-file dict whose node keys match in any namespace (`planner` -> `/**/planner`).

    rcl matches a key against the node's fully qualified name, so a bare `planner:` block is
    silently ignored by `/robot1/planner`; `/**/planner` matches it under every namespace.
    """
    out: dict = {}
    for key, block in params.items():
        name = str(key)
        if not name.startswith('/'):
            name = f'/**/{name}'
        out[name] = block
    return out


def plain_keys(params: dict) -> dict:
    """The inverse of namespaced(): `/**/planner` and `/planner` -> `planner` (`/**` stays);
    a parameter group written as a nested mapping (`lerobot: {state_units: raw}`) becomes
    its dotted names (`lerobot.state_units`), as rcl reads it, so one form is merged."""
    out: dict = {}
    for key, block in params.items():
        name = str(key)
        for prefix in ('/**/', '/'):
            if name.startswith(prefix) and name != '/**' and '/' not in name[len(prefix):]:
                name = name[len(prefix):]
                break
        if isinstance(block, dict) and isinstance(block.get('ros__parameters'), dict):
            block = {**block, 'ros__parameters': dotted(block['ros__parameters'])}
        out[name] = block
    return out


@dataclass(frozen=True)
class LaunchArgument:
    """One launch argument of sim.launch.py / real.launch.py (`ros2 launch ... --show-args`)."""

    name: str
    description: str
    default: str = ''
    graphs: tuple[str, ...] = ('sim', 'real')
    choices: tuple[str, ...] = ()


_BOOL = ('true', 'false')
LAUNCH_ARGUMENTS = (
    LaunchArgument('params_file', 'ros__parameters YAML for every node; empty = the shipped '
                   'config/sim.yaml or config/real.yaml (keys are node names, namespace-free)',
                   graphs=('sim', 'real', 'policy')),
    LaunchArgument('simulator', 'mujoco: the SO-101 tabletop; robocasa: RoboCasa kitchens (the '
                   'robocasa_bridge in .venv-robocasa, config/robocasa.yaml); robosuite / '
                   'standin: that bridge on a stock robosuite scene / the stand-in environment',
                   'mujoco', graphs=('sim',), choices=tuple(SIMULATORS)),
    LaunchArgument('namespace', 'namespace of every node and topic, e.g. /robot1; empty = root',
                   graphs=('sim', 'real', 'policy')),
    LaunchArgument('task', 'task to start with (planner parameter `task`; "direct: X" uses X '
                   'as the subtask); empty = wait for /task', graphs=('sim', 'real', 'policy')),
    LaunchArgument('planner_backend', 'planner backend: scripted, transformers, hierarchical; '
                   'empty = the params file (transformers when planner_model is set)',
                   graphs=('sim', 'real', 'policy')),
    LaunchArgument('planner_model', 'Hugging Face model directory or .gguf file for the '
                   'planner; empty = none', graphs=('sim', 'real', 'policy')),
    LaunchArgument('policy_backend', 'policy backend: scripted, lerobot, hierarchical; empty = '
                   'the params file (lerobot when policy_path is set)',
                   graphs=('sim', 'real', 'policy')),
    LaunchArgument('policy_path', 'LeRobot checkpoint (pretrained_model) directory of the '
                   'policy; empty = none', graphs=('sim', 'real', 'policy')),
    LaunchArgument('hierarchical', 'one checkpoint with a text and an action head for planner '
                   'and policy (sets both backends to hierarchical); use with composed:=true'),
    LaunchArgument('device', 'device of the model backends: auto, cpu, cuda, cuda:N; empty = '
                   'the params file', graphs=('sim', 'real', 'policy')),
    LaunchArgument('composed', 'planner and policy in one process (planner_policy) sharing one '
                   'loaded hierarchical model', 'false', choices=_BOOL),
    LaunchArgument('use_sim_time', 'nodes other than the simulator follow /clock', 'true',
                   graphs=('sim',), choices=_BOOL),
    LaunchArgument('use_sim_time', 'nodes follow /clock (a bag played with --clock)', 'false',
                   graphs=('real',), choices=_BOOL),
    LaunchArgument('robot_yaml', 'robot YAML (port, calibration, cameras, safety, policy, '
                   'planner; see config/robot.example.yaml); the arguments below override it '
                   '(policy graph with robot:=real: the same file gives the policy its '
                   'checkpoint, cameras and calibration)', graphs=('real', 'policy')),
    LaunchArgument('robot_port', 'serial device of the SO-101 bus, e.g. '
                   '/dev/serial/by-id/...; empty = robot_yaml', graphs=('real',)),
    LaunchArgument('calibration', 'LeRobot calibration id, or the path of its JSON file (a '
                   'value with / or ending in .json); empty = robot_yaml (policy graph: the '
                   "driver's file, copied to this computer, converts the policy's units)",
                   graphs=('real', 'policy')),
    LaunchArgument('cameras', 'YAML file of cameras, as the robot YAML `cameras:` block '
                   '(name: {source, width, height, fps, ...}); empty = robot_yaml',
                   graphs=('real', 'policy')),
    LaunchArgument('max_relative_target_rad', 'safety: clamp each goal to within this of the '
                   'present joint position (rad); empty = robot_yaml / params file',
                   graphs=('real',)),
    LaunchArgument('command_timeout_s', 'safety: hold when no command arrives for this long '
                   '(s); empty = robot_yaml / params file', graphs=('real',)),
    LaunchArgument('leader_port', 'serial device of an SO-101 leader arm (so101_leader node; '
                   'the takeover / handback services switch the arm to it); empty = none',
                   graphs=('sim', 'real')),
    LaunchArgument('leader_calibration', "the leader's LeRobot calibration id, or the path of "
                   'its JSON file', graphs=('sim', 'real')),
    LaunchArgument('viewer', 'start the live view (viewer node, MJPEG in a browser)', 'true',
                   choices=_BOOL),
    LaunchArgument('viewer_port', 'live view TCP port (the next free one is used if taken); '
                   'empty = the params file (8010)'),
    LaunchArgument('dry_run', 'the policy runs on the live observations and its chunks are '
                   'published, logged and played, but the executor never moves the arm (the '
                   'first run of a new checkpoint)', 'false', choices=_BOOL),
    LaunchArgument('record', 'also start the recorder node (rosbag2 MCAP of the session)',
                   'false', choices=_BOOL),
    LaunchArgument('record_dir', 'folder the recorder writes its bags into', 'recordings'),
    LaunchArgument('virtual_operator', 'also start the virtual operator: the scripted expert '
                   'takes over from a straying policy (/takeover, leader/joint_states) and hands '
                   'back once the subtask is done, recorded as a human\'s correction (DAgger; '
                   'MuJoCo only)', 'false', graphs=('sim',), choices=_BOOL),
    # Two computers (README "Two computers"): the robot side without the policy (and maybe
    # the planner), the policy computer with graph `policy`.
    LaunchArgument('without', 'nodes another computer runs, comma-separated (policy, planner): '
                   'the robot side of a split graph; empty = all here'),
    LaunchArgument('compressed_images', 'cameras also publish <image topic>/compressed (JPEG) '
                   'and a policy on another computer subscribes those; auto = when the graph is '
                   'split (without:=policy here, or the policy graph), a local policy stays '
                   'raw', 'auto', graphs=('sim', 'real', 'policy'),
                   choices=('auto', 'true', 'false')),
    LaunchArgument('jpeg_quality', 'JPEG quality of the compressed images (1..100); empty = '
                   'the params file (85)'),
    LaunchArgument('robot', 'the graph the policy computer joins: sim (follows /clock, the '
                   'scripted expert by default) or real', 'sim', graphs=('policy',),
                   choices=('sim', 'real')),
    LaunchArgument('planner', 'also run the planner on this computer (the robot side then runs '
                   'without:=policy,planner)', 'false', graphs=('policy',), choices=_BOOL),
)
POLICY_GRAPH = 'policy'  # the policy computer's part of a split graph
SPLITTABLE = ('policy', 'planner')
JPEG_GRAPHS = ('sim', 'real')  # whose cameras can publish <image topic>/compressed


def launch_arguments(graph_name: str) -> tuple[LaunchArgument, ...]:
    """The launch arguments of one graph's launch file."""
    return tuple(a for a in LAUNCH_ARGUMENTS if graph_name in a.graphs)


def model_overrides(policy_path: str = '', policy_backend: str = '', planner_model: str = '',
                    planner_backend: str = '', hierarchical: str = '',
                    device: str = '') -> dict[str, dict[str, object]]:
    """Planner/policy parameters of the model options ({} when none is given)."""
    out: dict[str, dict[str, object]] = {}
    if policy_path:
        out.setdefault('policy', {}).update(
            backend='lerobot', model_path=str(Path(policy_path).expanduser().resolve()))
    if policy_backend:
        out.setdefault('policy', {})['backend'] = policy_backend
    if planner_model:
        model = Path(planner_model).expanduser().resolve()
        planner: dict[str, object] = {'backend': 'transformers', 'direct_subtask': False}
        if model.suffix == '.gguf':
            planner.update({'model_path': str(model.parent), 'transformers.gguf_file': model.name})
        else:
            planner['model_path'] = str(model)
        out.setdefault('planner', {}).update(planner)
    if planner_backend:
        out.setdefault('planner', {})['backend'] = planner_backend
    if hierarchical:
        model_dir = str(Path(hierarchical).expanduser().resolve())
        out.setdefault('planner', {}).update(backend='hierarchical', model_path=model_dir,
                                             direct_subtask=False)
        out.setdefault('policy', {}).update(backend='hierarchical', model_path=model_dir)
    if device:
        for node in ('planner', 'policy'):
            out.setdefault(node, {})['device'] = device
    return out


RECORDER = NodeSpec('recorder', 'lerobot_lang_nodes.nodes.recorder_node', required=False)
# DAgger in simulation: the scripted expert takes over from a straying policy through the
# takeover path a human uses (MuJoCo tabletop only: it reads that scene's ground truth).
VIRTUAL_OPERATOR = NodeSpec('virtual_operator', 'lerobot_lang_nodes.nodes.virtual_operator_node',
                            required=False, use_sim_time=True)


@dataclass(frozen=True)
class GraphPlan:
    """What a graph starts, in memory: node specs, their parameters, where those came from."""

    specs: tuple[NodeSpec, ...]
    params: dict  # {node: {'ros__parameters': {...}}}, only the started nodes' blocks
    source: str  # the params file (and robot YAML) the parameters were read from
    namespace: str  # '' or '/robot1'


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch file starts: node specs, one resolved params file, the namespace."""

    specs: tuple[NodeSpec, ...]
    params_file: Path
    namespace: str
    params: dict


def _truthy(value: str) -> bool:
    return str(value).strip().lower() in ('true', '1', 'yes', 'on')


def _real_robot_overrides(values: dict[str, str]) -> dict[str, dict[str, object]]:
    drv: dict[str, object] = {}
    if values.get('robot_port'):
        drv['port'] = values['robot_port']
    cal = values.get('calibration', '')
    if cal:
        is_path = '/' in cal or cal.endswith('.json')
        drv['calibration_path' if is_path else 'calibration_id'] = cal
        drv['calibration_id' if is_path else 'calibration_path'] = ''
    for key in ('max_relative_target_rad', 'command_timeout_s'):
        if values.get(key):
            try:
                drv[key] = float(values[key])
            except ValueError:
                raise ValueError(f'launch argument {key}:={values[key]!r} is not a number; '
                                 'give seconds / radians, e.g. 0.35') from None
    out: dict[str, dict[str, object]] = {'so101_driver': drv} if drv else {}
    if 'calibration_id' in drv:  # the policy converts units with the driver's calibration
        out['policy'] = {f'lerobot.{k}': drv[k] for k in ('calibration_id', 'calibration_path')}
    return out


def launch_plan(graph_name: str, values: dict[str, str],
                out_dir: Path | None = None,
                overrides: dict[str, dict[str, object]] | None = None) -> LaunchPlan:
    """``plan`` with its parameters written to one file whose keys match under any namespace:
    ``out_dir``/lerobot_lang_<graph>_params.yaml (the launch files pass the launch's log
    folder), else a new temporary file the caller removes."""
    made = plan(graph_name, values, overrides)
    return _written_plan(graph_name, made, out_dir)


def plan(graph_name: str, values: dict[str, str],
         overrides: dict[str, dict[str, object]] | None = None) -> GraphPlan:
    """Resolve launch argument values (strings) into the nodes and parameters to start.

    The one plan of every starter: the launch files (`ros2 launch`), `lerobot-lang
    sim|real|policy` (cli/bringup.py maps its options onto these arguments) and
    testing.SimGraph (tests and benchmarks), so each starts the same nodes with the same
    parameters, the first task included (the planner's ``task`` parameter). ``overrides``
    (``{node: {parameter: value}}``) are set over the params file like the arguments' own.
    """
    defaults = {a.name: a.default for a in launch_arguments(graph_name)}
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ValueError(f'unknown launch arguments {unknown}; known: {sorted(defaults)}')
    v = {**defaults, **{k: str(x) for k, x in values.items()}}
    if graph_name == POLICY_GRAPH:
        return _policy_plan(v, overrides or {})
    nodes_of, simulator = (SIMULATORS[v['simulator']] if graph_name == 'sim'
                           else (graph_name, ''))
    params_file = Path(v['params_file']) if v['params_file'] else default_params_file(nodes_of)
    if not params_file.is_file():
        raise FileNotFoundError(f'parameters file {params_file} does not exist')
    overrides = _merge(model_overrides(v['policy_path'], v['policy_backend'],
                                       v['planner_model'], v['planner_backend'],
                                       v['hierarchical'], v['device']), overrides or {})
    if simulator:
        overrides = _merge(overrides, {ROBOCASA_BRIDGE.name: {'simulator': simulator}})
    if _truthy(v['dry_run']):
        overrides = _merge(overrides, dry_run_overrides(nodes_of))
    cameras: tuple[str, ...] = ()
    if graph_name == 'real':
        overrides = _merge(overrides, _real_robot_overrides(v))
        params, cameras = _real_params(v, params_file, overrides)
    else:
        params = plain_keys(yaml.safe_load(params_file.read_text(encoding='utf-8')) or {})
        for node, node_values in overrides.items():
            params.setdefault(node, {}).setdefault('ros__parameters', {}).update(node_values)
        fan_out_cameras(params, nodes_of)
    if v['viewer_port']:
        params.setdefault('viewer', {}).setdefault('ros__parameters', {})['port'] = int(
            v['viewer_port'])
    sim_time = _truthy(v['use_sim_time'])
    specs = list(real_specs(cameras) if graph_name == 'real' else GRAPHS[nodes_of])
    if _truthy(v['composed']) or v['hierarchical']:
        specs = list(composed(specs))
    if not _truthy(v['viewer']):
        specs = [s for s in specs if s.name != 'viewer']
    if v.get('leader_port'):
        specs.append(LEADER)
        for node, node_values in leader_parameters(v['leader_port'],
                                                   v['leader_calibration']).items():
            params.setdefault(node, {}).setdefault('ros__parameters', {}).update(node_values)
    if _truthy(v.get('virtual_operator', 'false')):
        if nodes_of != 'sim':
            raise ValueError('virtual_operator:=true needs the MuJoCo tabletop (simulator:='
                             f'mujoco): its expert reads that scene\'s ground truth, not '
                             f'{v["simulator"]}\'s')
        specs.append(VIRTUAL_OPERATOR)
    if _truthy(v['record']):
        specs.append(RECORDER)
        params.setdefault('recorder', {}).setdefault('ros__parameters', {})['output_dir'] = str(
            Path(v['record_dir']).expanduser().resolve())
        if cameras:
            params['recorder']['ros__parameters'].setdefault('cameras', list(cameras))
    specs = without(specs, v['without'])
    here = {n for s in specs for n in (s.hosts or (s.name,))}
    if v['task'].strip():
        if 'planner' not in here:
            raise ValueError(f'task {v["task"]!r}: the planner runs on the other computer '
                             '(without includes planner); give the task to that side '
                             '(`lerobot-lang policy --planner --task ...`, or task:= of '
                             'policy.launch.py), or send it on /task once both run')
        params.setdefault('planner', {}).setdefault('ros__parameters', {})['task'] = v['task']
    compressed = compressed_images(v['compressed_images'],
                                   split='policy' not in here and nodes_of in JPEG_GRAPHS)
    for node, node_values in compression_parameters(nodes_of, cameras, compressed,
                                                    v['jpeg_quality']).items():
        params.setdefault(node, {}).setdefault('ros__parameters', {}).update(node_values)
    for spec in specs:  # use_sim_time: the argument decides for the nodes that may follow /clock
        for name in spec.hosts or (spec.name,):
            block = params.setdefault(name, {}).setdefault('ros__parameters', {})
            block['use_sim_time'] = sim_time and (spec.use_sim_time or graph_name == 'real'
                                                  or spec is RECORDER)
    source = f'{v["robot_yaml"]} + {params_file}' if v.get('robot_yaml') else str(params_file)
    return _graph_plan(specs, params, source, v['namespace'])


def _graph_plan(specs: list[NodeSpec], params: dict, source: str,
                namespace: str) -> GraphPlan:
    """The plan with only the started nodes' parameter blocks."""
    used = {n for s in specs for n in (s.hosts or (s.name,))}
    params = {k: b for k, b in params.items() if k in used or k.startswith('/')}
    ns = namespace.strip()
    if ns and not ns.startswith('/'):
        ns = '/' + ns
    return GraphPlan(tuple(specs), params, source, ns.rstrip('/'))


def _written_plan(graph_name: str, made: GraphPlan, out_dir: Path | None) -> LaunchPlan:
    """``made`` with its parameters written to its file."""
    import tempfile
    if out_dir is not None:
        name = str(Path(out_dir) / f'lerobot_lang_{graph_name}_params.yaml')
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    else:
        fd, name = tempfile.mkstemp(prefix=f'lerobot_lang_{graph_name}_', suffix='.yaml')
    with open(fd, 'w', encoding='utf-8') as f:
        f.write(f'# {made.source} with the launch arguments; keys match in any namespace\n')
        yaml.dump(namespaced(made.params), f, Dumper=NoAliasDumper, sort_keys=False)
    return LaunchPlan(made.specs, Path(name), made.namespace, made.params)


def without(specs: list[NodeSpec] | tuple[NodeSpec, ...], names: str) -> list[NodeSpec]:
    """``specs`` less the nodes another computer runs (``names``: 'policy', 'policy,planner').

    A composed planner_policy goes only with both of its nodes (one process, one computer).
    """
    gone = set(split_names(names))
    wrong = sorted(gone - set(SPLITTABLE))
    if wrong:
        raise ValueError(f'without: {wrong} cannot run on another computer; only '
                         f'{list(SPLITTABLE)} can (the robot side keeps the executor, cameras '
                         'and viewer)')
    out = []
    for spec in specs:
        hosted = set(spec.hosts or (spec.name,))
        if hosted & gone and not hosted <= gone:
            raise ValueError(f'without: {sorted(hosted & gone)} share one process '
                             f'({spec.name}) with {sorted(hosted - gone)}; leave out both or '
                             'run them apart (composed off)')
        if not hosted & gone:
            out.append(spec)
    return out


def split_names(names: str) -> tuple[str, ...]:
    """'policy, planner' -> ('policy', 'planner')."""
    return tuple(n.strip() for n in str(names).split(',') if n.strip())


def compressed_images(value: str, split: bool) -> bool:
    """The compressed_images argument: 'auto' is on where the policy is on another computer."""
    return split if value in ('', 'auto') else _truthy(value)


def compression_parameters(nodes_of: str, cameras: tuple[str, ...] | list[str],
                           compressed: bool, jpeg_quality: str = '',
                           ) -> dict[str, dict[str, object]]:
    """Parameters of compressed images: the nodes that publish frames (the MuJoCo bridge or
    the camera nodes) add <image topic>/compressed, and on the policy computer (``nodes_of``
    'policy') the policy reads them; a policy on the robot's computer stays raw. {} when
    off."""
    if not compressed:
        return {}
    publish: dict[str, object] = {'publish_compressed': True}
    if jpeg_quality:
        publish['jpeg_quality'] = int(jpeg_quality)
    if nodes_of == 'sim':
        out = {SIM[0].name: dict(publish)}
    elif nodes_of == 'real':
        out = {camera_spec(c).name: dict(publish) for c in cameras}
    elif nodes_of == POLICY_GRAPH:
        return {'policy': {'image_transport': 'compressed'}}
    else:
        raise ValueError(f'compressed images: the {nodes_of} graph\'s cameras cannot publish '
                         'them (MuJoCo sim and real cameras only)')
    return out


def _policy_plan(v: dict[str, str], overrides: dict[str, dict[str, object]]) -> GraphPlan:
    """The policy computer's part of a split graph: the policy (and with planner:=true the
    planner) of the robot's graph, with its parameters, reading compressed images unless
    compressed_images:=false."""
    robot = v['robot']
    params_file = Path(v['params_file']) if v['params_file'] else default_params_file(robot)
    overrides = _merge(model_overrides(v['policy_path'], v['policy_backend'],
                                       v['planner_model'], v['planner_backend'], '',
                                       v['device']), overrides)
    cal = v.get('calibration', '')
    if cal:
        is_path = '/' in cal or cal.endswith('.json')
        overrides = _merge(overrides, {'policy': {
            'lerobot.calibration_path' if is_path else 'lerobot.calibration_id': cal,
            'lerobot.calibration_id' if is_path else 'lerobot.calibration_path': ''}})
    if compressed_images(v['compressed_images'], split=True):
        overrides = _merge(overrides, compression_parameters(POLICY_GRAPH, (), True))
    names = ('planner', 'policy') if _truthy(v['planner']) else ('policy',)
    if robot == 'real' and (v['robot_yaml'] or v['cameras']):
        # The robot's own YAML: checkpoint, cameras and calibration as on one computer.
        real = {**v, 'robot_port': '', 'max_relative_target_rad': '', 'command_timeout_s': '',
                'without': ','.join(n for n in SPLITTABLE if n not in names)}
        params = _real_params(real, params_file, overrides)[0]
    else:
        params = plain_keys(yaml.safe_load(params_file.read_text(encoding='utf-8')) or {})
        for node, node_values in overrides.items():
            params.setdefault(node, {}).setdefault('ros__parameters', {}).update(node_values)
    specs = [s for s in GRAPHS[robot] if s.name in names]
    if v['task'].strip():
        if 'planner' not in names:
            raise ValueError(f'task {v["task"]!r}: the planner is not on this computer; add '
                             'planner:=true (--planner) or give the task on the robot side')
        params.setdefault('planner', {}).setdefault('ros__parameters', {})['task'] = v['task']
    for spec in specs:  # sim: the robot side's /clock; real: wall clocks (never compared)
        params.setdefault(spec.name, {}).setdefault('ros__parameters', {})['use_sim_time'] = (
            robot == 'sim')
    source = (f'{v["robot_yaml"]} + {params_file}' if robot == 'real' and v['robot_yaml']
              else str(params_file))
    return _graph_plan(specs, params, source, v['namespace'])


def _merge(a: dict[str, dict[str, object]], b: dict[str, dict[str, object]]) -> dict:
    out = {k: dict(x) for k, x in a.items()}
    for node, values in b.items():
        out.setdefault(node, {}).update(values)
    return out


def _real_params(v: dict[str, str], params_file: Path,
                 overrides: dict[str, dict[str, object]]) -> tuple[dict, tuple[str, ...]]:
    """The REAL graph's parameters from a robot YAML and/or the individual arguments.

    Checked in memory (nothing written): a refusal names the user's robot YAML, or the launch
    arguments when there is none.
    """
    from lerobot_lang_nodes import real_config
    robot: object = {}
    if v['robot_yaml']:
        robot = real_config.read_robot_yaml(Path(v['robot_yaml'])) or {}
    if isinstance(robot, dict):
        if v['cameras']:
            robot['cameras'] = yaml.safe_load(
                Path(v['cameras']).read_text(encoding='utf-8')) or {}
        drv = overrides.get('so101_driver', {})
        robot.setdefault('port', str(drv.get('port') or ''))
        robot.setdefault('calibration', {'id': str(drv.get('calibration_id') or ''),
                                         'path': str(drv.get('calibration_path') or '')})
        robot.setdefault('cameras', {})
    # Relative paths in the settings stay relative to the file they came from.
    source = v['robot_yaml'] or v['cameras']
    folder = Path(source).resolve().parent if source else Path.cwd()
    label = v['robot_yaml'] or 'the launch arguments (no robot_yaml:=)'
    checked = real_config.check_robot(robot, real_config.Source(label, folder))
    merged = real_config.robot_parameters(checked, params_file, overrides, label,
                                          elsewhere=split_names(v.get('without', '')))
    return merged, tuple(checked['cameras'])


class NoAliasDumper(yaml.SafeDumper):
    """rcl's params-file parser rejects YAML anchors/aliases: write every value in full."""

    def ignore_aliases(self, data: object) -> bool:
        return True
