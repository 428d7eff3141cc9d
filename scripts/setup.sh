#!/usr/bin/env bash
# Idempotent set-up of a pip-only ROS 2 Kilted environment on Python 3.12 in .venv (no system
# ROS needed): pinned wheels, the fix for the wheels' CMake exports, the lerobot_lang_msgs
# interface package built from msg/, and lerobot_lang_nodes installed in editable mode.
# `--ml` (or LEROBOT_LANG_ML=1) adds the model backends (torch, LeRobot, transformers); the
# scripted sim does not need them. Re-running skips every step whose inputs did not change.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LEROBOT_LANG_VENV:-$ROOT/.venv}
STAMPS=$VENV/.lerobot_lang_stamps
log() { printf '[setup] %s\n' "$*" >&2; }

WITH_ML=${LEROBOT_LANG_ML:-0}
for arg in "$@"; do
  case $arg in
    --ml) WITH_ML=1 ;;
    *) log "unknown option $arg (known: --ml)"; exit 2 ;;
  esac
done

# LeRobot >= 0.5 needs Python >= 3.12, and so do the ROS 2 Jazzy/Kilted binaries of Ubuntu
# 24.04; the Kilted wheels are pinned for cp312. A pyenv install is found without its shim.
find_python() {
  local candidates=("${PYTHON:-}" python3.12 python3)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root 2>/dev/null || true)
    [ -n "$root" ] && candidates+=("$root"/versions/3.12.*/bin/python3.12)
  fi
  for candidate in "${candidates[@]}"; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  log "Python 3.12 not found (LeRobot and the pinned ROS 2 Kilted wheels need it);" \
    "install it (apt-get install python3.12 python3.12-venv) or set PYTHON=/path/to/python3.12"
  return 1
}

# stamp NAME FILES... : true when the hash of FILES equals the stored stamp
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
stamp_ok() { local name=$1; shift; [ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$(hash_of "$@")" ]; }
stamp_write() { local name=$1; shift; mkdir -p "$STAMPS"; hash_of "$@" >"$STAMPS/$name"; }

command -v cmake >/dev/null || { log "cmake is required (apt-get install cmake g++)"; exit 1; }
command -v g++ >/dev/null || { log "g++ is required (apt-get install g++)"; exit 1; }

if [ -x "$VENV/bin/python" ] &&
  ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
  log "$VENV is not a Python 3.12 environment (made by an older checkout); rebuilding it"
  rm -rf "$VENV" "$ROOT/build"
fi
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

ML_REQS=("$ROOT"/requirements/ml.txt "$ROOT"/requirements/ml-nodeps.txt "$ROOT"/requirements/constraints.txt)
if [ "$WITH_ML" = 1 ] && ! stamp_ok ml "${ML_REQS[@]}"; then
  log "installing the model backends (torch, LeRobot, transformers; a few GB on first run)"
  "$VPY" -m pip install --disable-pip-version-check -q -c "$ROOT/requirements/constraints.txt" \
    -r "$ROOT/requirements/ml.txt"
  "$VPY" -m pip install --disable-pip-version-check -q --no-deps -r "$ROOT/requirements/ml-nodeps.txt"
  stamp_write ml "${ML_REQS[@]}"
fi

# The wheels' *__rosidl_generator_pyExport.cmake files name the wheel build host's Python and
# numpy include dirs; CMake refuses imported targets with non-existent include paths.
PY_INC=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NP_INC=$("$VPY" -c 'import numpy; print(numpy.get_include())')
mapfile -t broken < <(grep -l '/opt/python/cp3[0-9]*-cp3' "$VENV"/share/*/cmake/*.cmake 2>/dev/null || true)
if [ "${#broken[@]}" -gt 0 ]; then
  log "fixing include paths in ${#broken[@]} CMake export files of the ROS wheels"
  sed -i -E -e "s#/opt/python/cp3[0-9]+-cp3[0-9]+/lib/python3\.[0-9]+/site-packages/numpy/_core/include#$NP_INC#g" \
    -e "s#/opt/python/cp3[0-9]+-cp3[0-9]+/include/python3\.[0-9]+#$PY_INC#g" "${broken[@]}"
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
