"""The node graphs (sim, real), defined once for `lerobot-lang` and the launch files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lerobot_lang_nodes import paths


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

# Set by `lerobot-lang` in each node's environment: the node then stops when its supervisor
# dies (nodes/runner.py), so a killed bring-up never leaves nodes behind.
SUPERVISOR_PID_ENV = 'LEROBOT_LANG_SUPERVISOR_PID'

GRAPHS: dict[str, tuple[NodeSpec, ...]] = {'sim': SIM, 'real': REAL}

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
                    remaps=tuple((t, f'cameras/{camera}/{t}') for t in CAMERA_TOPICS))


def real_specs(cameras: tuple[str, ...] | list[str] = ()) -> tuple[NodeSpec, ...]:
    """The REAL graph plus one camera node per configured camera (before the planner)."""
    return (REAL[0], *(camera_spec(c) for c in cameras), *REAL[1:])
PARAMS_FILES = {'sim': 'sim.yaml', 'real': 'real.yaml'}


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
