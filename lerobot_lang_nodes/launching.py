"""The launch description both launch files return; the graph itself is defined in graph.py.

Imported only by `ros2 launch` (launch and launch_ros are not needed anywhere else).
"""

from __future__ import annotations

from typing import Any

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from lerobot_lang_nodes import graph


def _nodes(context: Any, graph_name: str) -> list[Node]:
    values = {a.name: LaunchConfiguration(a.name).perform(context)
              for a in graph.launch_arguments(graph_name)}
    plan = graph.launch_plan(graph_name, values)
    # A composed process must not get `name=`: launch_ros turns it into a global __node remap,
    # which would give both of its nodes the same name.
    return [Node(package='lerobot_lang_nodes', executable=spec.script,
                 name=None if spec.hosts else spec.name, namespace=plan.namespace or None,
                 parameters=[str(plan.params_file)], remappings=list(spec.remaps),
                 output='screen')
            for spec in plan.specs]


def launch_description(graph_name: str) -> LaunchDescription:
    """Every argument of ``graph_name`` ('sim' or 'real') declared, then its nodes."""
    return LaunchDescription([
        *(DeclareLaunchArgument(a.name, default_value=a.default, description=a.description,
                                **({'choices': list(a.choices)} if a.choices else {}))
          for a in graph.launch_arguments(graph_name)),
        OpaqueFunction(function=_nodes, args=[graph_name]),
    ])
