#!/usr/bin/env bash
# Idempotent set-up of a pip-only ROS 2 Kilted environment in .venv (no system ROS needed):
# pinned wheels, the fix for the wheels' CMake exports, the lerobot_lang_msgs interface package
# built from msg/, and lerobot_lang_nodes installed in editable mode. Re-running skips every step
# whose inputs did not change.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LEROBOT_LANG_VENV:-$ROOT/.venv}
STAMPS=$VENV/.lerobot_lang_stamps
log() { printf '[setup] %s\n' "$*" >&2; }

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  log "Python 3.11 not found (the ROS 2 Kilted wheels are built for it); set PYTHON=/path/to/python3.11"
  return 1
}

# stamp NAME FILES... : true when the hash of FILES equals the stored stamp
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
stamp_ok() { local name=$1; shift; [ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$(hash_of "$@")" ]; }
stamp_write() { local name=$1; shift; mkdir -p "$STAMPS"; hash_of "$@" >"$STAMPS/$name"; }

command -v cmake >/dev/null || { log "cmake is required (apt-get install cmake g++)"; exit 1; }
command -v g++ >/dev/null || { log "g++ is required (apt-get install g++)"; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  log "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python

REQS=("$ROOT"/requirements/ros.txt "$ROOT"/requirements/base.txt "$ROOT"/requirements/test.txt "$ROOT"/requirements/constraints.txt)
if ! stamp_ok requirements "${REQS[@]}"; then
  log "installing pinned requirements"
  "$VPY" -m pip install --disable-pip-version-check -q -c "$ROOT/requirements/constraints.txt" \
    -r "$ROOT/requirements/ros.txt" -r "$ROOT/requirements/base.txt" -r "$ROOT/requirements/test.txt"
  stamp_write requirements "${REQS[@]}"
fi

# The wheels' *__rosidl_generator_pyExport.cmake files name the wheel build host's Python and
# numpy include dirs; CMake refuses imported targets with non-existent include paths.
PY_INC=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NP_INC=$("$VPY" -c 'import numpy; print(numpy.get_include())')
mapfile -t broken < <(grep -l '/opt/python/cp311-cp311' "$VENV"/share/*/cmake/*.cmake 2>/dev/null || true)
if [ "${#broken[@]}" -gt 0 ]; then
  log "fixing include paths in ${#broken[@]} CMake export files of the ROS wheels"
  sed -i -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$NP_INC#g" \
    -e "s#/opt/python/cp311-cp311/include/python3.11#$PY_INC#g" "${broken[@]}"
fi

MSG_SRC=$ROOT/msg/lerobot_lang_msgs
mapfile -t MSG_FILES < <(find "$MSG_SRC" -type f | sort)
if ! stamp_ok msgs "${MSG_FILES[@]}" || ! "$VPY" -c 'import lerobot_lang_msgs.msg' 2>/dev/null; then
  log "building lerobot_lang_msgs from msg/ (about 20 s)"
  BUILD=$ROOT/build/lerobot_lang_msgs; mkdir -p "$ROOT/build"
  cmake -S "$MSG_SRC" -B "$BUILD" -DCMAKE_INSTALL_PREFIX="$VENV" -DCMAKE_PREFIX_PATH="$VENV" \
    -DPython3_EXECUTABLE="$VPY" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >"$BUILD.log" 2>&1 ||
    { tail -40 "$BUILD.log" >&2; log "configure failed; full log: $BUILD.log"; exit 1; }
  cmake --build "$BUILD" -j "$(nproc)" >>"$BUILD.log" 2>&1 ||
    { tail -40 "$BUILD.log" >&2; log "build failed; full log: $BUILD.log"; exit 1; }
  cmake --install "$BUILD" >>"$BUILD.log" 2>&1 ||
    { tail -40 "$BUILD.log" >&2; log "install failed; full log: $BUILD.log"; exit 1; }
  stamp_write msgs "${MSG_FILES[@]}"
fi

if ! stamp_ok package "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml" ||
  ! "$VPY" -c 'import lerobot_lang_nodes' 2>/dev/null; then
  log "installing lerobot_lang_nodes (editable)"
  "$VPY" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e "$ROOT"
  stamp_write package "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml"
fi
# setup.cfg puts executables in lib/lerobot_lang_nodes, where `ros2 run` looks for them; link
# them into the venv's bin/ so `lerobot-lang` is on PATH in the pip-only set-up too.
if [ -d "$VENV/lib/lerobot_lang_nodes" ]; then
  for exe in "$VENV"/lib/lerobot_lang_nodes/*; do
    [ -e "$VENV/bin/$(basename "$exe")" ] || ln -s "$exe" "$VENV/bin/$(basename "$exe")"
  done
fi
log "ready: $VENV"
