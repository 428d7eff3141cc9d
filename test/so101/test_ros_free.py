"""The so101 package must import without ROS (it is the core the driver node wraps)."""

from __future__ import annotations

import subprocess
import sys


def test_so101_imports_with_rclpy_blocked() -> None:
    code = ("import sys; sys.modules['rclpy'] = None\n"
            "import lerobot_lang_nodes.so101.driver_core, lerobot_lang_nodes.so101.emulator\n"
            "import lerobot_lang_nodes.so101.leader_host\n")
    subprocess.run([sys.executable, '-c', code], check=True, timeout=60)
