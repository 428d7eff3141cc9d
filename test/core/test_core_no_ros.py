"""The runtime core must import and work without any ROS module."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Every module of the package: a new one is checked without being listed.
CORE_MODULES = tuple(sorted(p.stem for p in (Path(__file__).resolve().parents[2] /
                                             'lerobot_lang_nodes' / 'core').glob('*.py')
                            if p.stem != '__init__'))


def test_core_imports_with_rclpy_blocked():
    # A fresh interpreter: the test session itself may already have loaded rclpy.
    code = textwrap.dedent(f"""
        import sys
        for name in ('rclpy', 'rclpy.node', 'rosidl_runtime_py', 'std_msgs',
                     'lerobot_lang_msgs', 'builtin_interfaces'):
            sys.modules[name] = None  # any import of these now raises ImportError
        import importlib
        for mod in {CORE_MODULES!r}:
            importlib.import_module('lerobot_lang_nodes.core.' + mod)
        import lerobot_lang_nodes.core
        ros = sorted(m for m in sys.modules if m.split('.')[0] in
                     ('rclpy', 'rcl', 'rosidl_runtime_py', 'rmw', 'std_msgs') and
                     sys.modules[m] is not None)
        assert not ros, ros
        from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig
        ex = ChunkExecutor(ExecutorConfig(action_names=('a',)))
        ex.submit(Chunk(values=[[1.0]], action_names=('a',), revision=0, sequence=0,
                        stamp_s=0.0), 0.0)
        assert ex.tick(0.0).tolist() == [1.0]
        print('ok')
    """)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
        p for p in (str(repo), os.environ.get('PYTHONPATH', '')) if p)}
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=60, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'ok'
