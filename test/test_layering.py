"""The package's layering (ARCHITECTURE.md, "Layers"): imports only go down or sideways, no
package imports another that imports it back, and the ROS-free packages import without ROS.

Every import statement counts, also the lazy ones inside functions: a lazy upward import is
still a dependency on the layer above. A new package or top-level module fails the test until
it is given a floor here (and a line in ARCHITECTURE.md).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'lerobot_lang_nodes'

# Floor of each package (folder) or top-level module: an import may go to its own floor or
# lower, never higher. The ground floor holds no ROS and no project imports above it.
FLOORS = {
    'core': 0, 'paths': 0, 'allocator': 0, 'dependencies': 0, 'procs': 0, 'dds': 0,
    'pytest_plugin': 0, 'netns': 0,
    'sim': 1, 'robocasa': 1, 'viewer': 1, 'so101': 1,
    'real_config': 2, 'backends': 2,
    'graph': 3, 'launching': 3, 'hierarchical': 3,
    'recording': 4, 'tiny_models': 4,
    'nodes': 5, 'training': 5,
    'cli': 6, 'testing': 6, 'remote_monitor': 6,
}
# Packages that must never load ROS (the nodes wrap them), checked in a fresh interpreter.
ROS_FREE = ('core', 'sim', 'so101', 'robocasa', 'viewer', 'recording', 'training',
            'tiny_models', 'backends', 'hierarchical')
ROS_MODULES = ('rclpy', 'rclpy.node', 'rosidl_runtime_py', 'std_msgs', 'sensor_msgs',
               'lerobot_lang_msgs', 'builtin_interfaces', 'diagnostic_msgs', 'rosbag2_py')


def unit_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_units(path: Path) -> set[str]:
    return units_in(path.read_text(), path.relative_to(PACKAGE).parent.parts)


def units_in(source: str, here: tuple[str, ...]) -> set[str]:
    """Project units a module in folder ``here`` imports, absolute or relative, at any depth
    of the code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                names = ['.'.join(('lerobot_lang_nodes', *base, *(
                    [node.module] if node.module else [a.name])))
                    for a in (node.names if not node.module else node.names[:1])]
            else:
                names = [node.module or '']
                if node.module == 'lerobot_lang_nodes':
                    names = [f'lerobot_lang_nodes.{a.name}' for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split('.')
            if parts[0] == 'lerobot_lang_nodes' and len(parts) > 1:
                found.add(parts[1])
    return found


def dependency_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob('*.py'):
        unit = unit_of(path)
        if unit == '__init__':
            continue
        graph.setdefault(unit, set()).update(u for u in imported_units(path) if u != unit)
    return graph


def test_every_unit_has_a_floor():
    missing = sorted(set(dependency_graph()) - set(FLOORS))
    assert not missing, f'give these a floor in FLOORS (and a line in ARCHITECTURE.md): {missing}'


def test_no_import_goes_up():
    upward = sorted(f'{a} (floor {FLOORS[a]}) imports {b} (floor {FLOORS[b]})'
                    for a, deps in dependency_graph().items() for b in deps
                    if a in FLOORS and b in FLOORS and FLOORS[b] > FLOORS[a])
    assert not upward, upward


def test_no_import_cycle():
    graph = dependency_graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = 1
        for dep in sorted(graph.get(unit, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [unit, dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[unit] = 2

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [unit])
    assert not cycles, cycles


def test_the_checker_sees_lazy_and_relative_imports():
    # The checks above are only as good as the import reader: it must see an import inside a
    # function and a relative one, which is how an upward dependency would hide.
    source = ('def f():\n    from lerobot_lang_nodes.nodes import qos\n'
              'from ..cli import main\nfrom . import executor\nimport numpy\n'
              'from lerobot_lang_nodes import graph\n')
    assert units_in(source, ('core',)) == {'nodes', 'cli', 'core', 'graph'}


def test_ros_free_packages_import_without_ros():
    modules = sorted('.'.join(('lerobot_lang_nodes', *p.relative_to(PACKAGE).with_suffix('')
                                   .parts)).removesuffix('.__init__')
                     for package in ROS_FREE for p in (PACKAGE / package).rglob('*.py'))
    # A fresh interpreter: the test session itself may already have loaded rclpy.
    code = textwrap.dedent(f"""
        import importlib, sys
        for name in {ROS_MODULES!r}:
            sys.modules[name] = None  # any import of these now raises ImportError
        for mod in {modules!r}:
            importlib.import_module(mod)
        ros = sorted(m for m in sys.modules if m.split('.')[0] in
                     ('rclpy', 'rcl', 'rosidl_runtime_py', 'rmw', 'std_msgs', 'sensor_msgs')
                     and sys.modules[m] is not None)
        assert not ros, ros
        from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig
        ex = ChunkExecutor(ExecutorConfig(action_names=('a',)))
        ex.submit(Chunk(values=[[1.0]], action_names=('a',), revision=0, sequence=0,
                        stamp_s=0.0), 0.0)
        assert ex.tick(0.0).tolist() == [1.0]
        print(len({modules!r}))
    """)
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
        p for p in (str(REPO), os.environ.get('PYTHONPATH', '')) if p),
        'HF_HUB_OFFLINE': '1'}
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert int(proc.stdout.strip()) == len(modules) > 50
