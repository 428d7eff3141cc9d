"""The launch description both launch files return; the graph itself is defined in graph.py.

Imported only by `ros2 launch` (launch and launch_ros are not needed anywhere else).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable
from typing import Any

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from lerobot_lang_nodes import graph


class RequiredNodeExited(RuntimeError):
    """A required node (driver, simulator, planner, policy, camera) ended: the launch stops.

    Raised from the node's exit handler. launch's LaunchService catches an exception raised
    while it handles an event, shuts every process down and returns 1, which `ros2 launch`
    exits with; a Shutdown action would exit 0, as if nothing had gone wrong.
    """


def _stop_launch_on_exit(name: str) -> Callable[[Any, Any], None]:
    def on_exit(event: Any, context: Any) -> None:
        if context.is_shutdown:  # Ctrl-C or another node's exit: every node stops anyway
            return None
        raise RequiredNodeExited(f'required node {name} exited with code {event.returncode};'
                                 ' stopping the launch (its log above says why)')
    return on_exit


def _nodes(context: Any, graph_name: str) -> list[Node]:
    # Looked up per launch, not at import: launch_config belongs to this `ros2 launch`.
    from launch.logging import get_logger, launch_config
    values = {a.name: LaunchConfiguration(a.name).perform(context)
              for a in graph.launch_arguments(graph_name)}
    # The generated params file goes into this launch's log folder (~/.ros/log/<launch>/),
    # next to the nodes' logs: a record of what ran, and nothing piles up in the temp folder.
    plan = graph.launch_plan(graph_name, values, out_dir=Path(launch_config.log_dir))
    get_logger('lerobot_lang_nodes.launch').info(f'node parameters: {plan.params_file}')
    # A composed process must not get `name=`: launch_ros turns it into a global __node remap,
    # which would give both of its nodes the same name.
    return [_node(spec, plan) for spec in plan.specs]


def _node(spec: graph.NodeSpec, plan: graph.LaunchPlan) -> Node:
    common = dict(name=None if spec.hosts else spec.name, namespace=plan.namespace or None,
                  parameters=[str(plan.params_file)], remappings=list(spec.remaps),
                  output='screen')
    if spec.required:  # as `lerobot-lang` does: the graph cannot go on without this node
        common['on_exit'] = _stop_launch_on_exit(spec.name)
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
