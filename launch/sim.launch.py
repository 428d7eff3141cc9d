"""Launch the simulated graph in a ROS 2 workspace: `ros2 launch lerobot_lang_nodes sim.launch.py`.

The nodes and their parameters come from lerobot_lang_nodes.graph and config/sim.yaml, the same
definition `lerobot-lang sim` uses on pip-only machines.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from lerobot_lang_nodes import graph


def generate_launch_description() -> LaunchDescription:
    params = LaunchConfiguration('params_file')
    nodes = [
        Node(package='lerobot_lang_nodes', executable=spec.name, name=spec.name,
             parameters=[params, {'use_sim_time': spec.use_sim_time}],
             remappings=list(spec.remaps), output='screen')
        for spec in graph.SIM
    ]
    return LaunchDescription([
        DeclareLaunchArgument('params_file', default_value=str(graph.default_params_file('sim')),
                              description='ros__parameters YAML for every node'),
        *nodes,
    ])
