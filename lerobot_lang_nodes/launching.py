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
    return [_node(spec, plan) for spec in plan.specs]


def _node(spec: graph.NodeSpec, plan: graph.LaunchPlan) -> Node:
    common = dict(name=None if spec.hosts else spec.name, namespace=plan.namespace or None,
                  parameters=[str(plan.params_file)], remappings=list(spec.remaps),
                  output='screen')
    if spec.environment:
        # A node of another virtual environment (the RoboCasa bridge): that environment's
        # Python runs the module, with its own prefix for the interface libraries.
        prefix = graph.environment_prefix(spec.environment)
        return Node(executable=graph.interpreter(spec), arguments=['-m', spec.module],
                    additional_env={'AMENT_PREFIX_PATH': str(prefix)}, **common)
    return Node(package='lerobot_lang_nodes', executable=spec.script, **common)


def launch_description(graph_name: str) -> LaunchDescription:
    """Every argument of ``graph_name`` ('sim' or 'real') declared, then its nodes."""
    return LaunchDescription([
        *(DeclareLaunchArgument(a.name, default_value=a.default, description=a.description,
                                **({'choices': list(a.choices)} if a.choices else {}))
          for a in graph.launch_arguments(graph_name)),
        OpaqueFunction(function=_nodes, args=[graph_name]),
    ])
