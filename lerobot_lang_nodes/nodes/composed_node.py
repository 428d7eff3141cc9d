"""`planner_policy`: the planner and the policy nodes in one process, on one executor.

With the `hierarchical` backends on both and the same ``model_path``, the checkpoint is loaded
once and serves the planner's text head and the policy's action head (hierarchical/loading.py).
Both nodes keep their own names (`planner`, `policy`), so the `planner:` and `policy:` blocks of
the same params file configure them. A global ``-r __node:=...`` remap would rename both; use
node-targeted remaps (``-r planner:__node:=...``) instead. ``-p`` overrides reach both nodes.

Shared models are reported on /diagnostics as ``planner: shared models`` (loads per checkpoint
and their users).
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from lerobot_lang_nodes.hierarchical import loading
from lerobot_lang_nodes.nodes import runner
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher

NAME = 'planner_policy'
_publishers: list[DiagnosticsPublisher] = []  # keeps the status publisher with the process


def shared_models_status() -> tuple[str, str, dict[str, Any]]:
    """Diagnostics of the process's shared models: each should have been loaded once."""
    models = loading.loaded()
    values: dict[str, Any] = {'model_loads': loading.load_count(), 'models': len(models)}
    reloaded = []
    for model in models:
        loads = loading.load_count(model.model_path)
        path, device, dtype = model.key
        values[path] = (f'type={model.policy_type} loads={loads} users='
                        f'{",".join(sorted(model.users))} device={device} dtype={dtype} '
                        f'load_s={model.load_s:.2f}')
        if loads > 1:
            reloaded.append(path)
    if reloaded:
        return 'warn', f'loaded more than once: {reloaded}', values
    if not models:
        return 'ok', 'no shared model (the backends hold their own)', values
    return 'ok', f'{len(models)} shared model(s), each loaded once', values


def _discard(node: Node) -> None:
    close = getattr(node, 'close', None)
    if callable(close):
        close()
    node.destroy_node()


def build_nodes() -> list[Node]:
    """PlannerNode then PolicyNode (the policy's first chunk needs the planner's context)."""
    from lerobot_lang_nodes.nodes.planner_node import PlannerNode
    from lerobot_lang_nodes.nodes.policy_node import PolicyNode
    planner = PlannerNode()
    try:
        policy = PolicyNode()
    except BaseException:
        _discard(planner)
        raise
    names = (planner.get_fully_qualified_name(), policy.get_fully_qualified_name())
    if names[0] == names[1]:
        _discard(policy)
        _discard(planner)
        raise ValueError(f'both nodes of {NAME} are named {names[0]!r}: a global '
                         '`-r __node:=...` renames every node of a process; use node-targeted '
                         'remaps (`-r planner:__node:=a -r policy:__node:=b`)')
    _publishers.append(DiagnosticsPublisher(planner, 'shared models', shared_models_status))
    _, message, _ = shared_models_status()
    planner.get_logger().info(f'{NAME}: {names[0]} and {names[1]} in one process; {message}')
    return [planner, policy]


def main(args: list[str] | None = None) -> int:
    return runner.run(build_nodes, args, threads=6, name=NAME)


if __name__ == '__main__':
    raise SystemExit(main())
