"""Launch the simulated graph in a ROS 2 workspace: `ros2 launch lerobot_lang_nodes sim.launch.py`.

The nodes and their parameters come from lerobot_lang_nodes.graph and config/sim.yaml, the same
definition `lerobot-lang sim` uses on pip-only machines. `composed:=true` runs the planner and
the policy in one process (`planner_policy`, as `lerobot-lang sim --composed`), so a
hierarchical checkpoint named by both is loaded once.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from lerobot_lang_nodes import graph


def _node(spec: graph.NodeSpec, params: LaunchConfiguration, condition=None) -> Node:
    # A composed process must not get `name=`: launch_ros turns it into a global __node remap,
    # which would give both of its nodes the same name.
    return Node(package='lerobot_lang_nodes', executable=spec.name,
                name=None if spec.hosts else spec.name,
                parameters=[params, {'use_sim_time': spec.use_sim_time}],
                remappings=list(spec.remaps), output='screen', condition=condition)


def generate_launch_description() -> LaunchDescription:
    params = LaunchConfiguration('params_file')
    composed = LaunchConfiguration('composed')
    split_graph = graph.SIM
    composed_graph = graph.composed(graph.SIM)
    nodes = []
    for spec in split_graph:  # the order of the split graph; the composed node at its place
        if spec in composed_graph:
            nodes.append(_node(spec, params))
        else:
            nodes.append(_node(spec, params, UnlessCondition(composed)))
        if spec.name == graph.COMPOSED_HOSTS[0]:
            nodes.extend(_node(s, params, IfCondition(composed))
                         for s in composed_graph if s not in split_graph)
    return LaunchDescription([
        DeclareLaunchArgument('params_file', default_value=str(graph.default_params_file('sim')),
                              description='ros__parameters YAML for every node'),
        DeclareLaunchArgument('composed', default_value='false', choices=['true', 'false'],
                              description='planner and policy in one process (planner_policy) '
                                          'sharing one loaded hierarchical model'),
        *nodes,
    ])
