#!/usr/bin/env bash
# Set up (idempotent) and start the simulated system end to end. Extra arguments go to
# `lerobot-lang sim` (see `lerobot-lang sim --help`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/system-deps.sh"
"$ROOT/scripts/setup.sh"
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export MUJOCO_GL=${MUJOCO_GL:-egl}
export AMENT_PREFIX_PATH="$ROOT/.venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
exec "$ROOT/.venv/bin/lerobot-lang" sim "$@"
