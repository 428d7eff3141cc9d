#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/system-deps.sh"
# --robocasa also builds .venv-robocasa (robosuite 1.5.2, MuJoCo < 3.10) for the robocasa_bridge.
"$ROOT/scripts/setup.sh" --ml --robocasa
cd "$ROOT"
# DDS stays on this machine; test/conftest.py also picks a free ROS_DOMAIN_ID per run.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export MUJOCO_GL=${MUJOCO_GL:-egl}
export AMENT_PREFIX_PATH="$ROOT/.venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
