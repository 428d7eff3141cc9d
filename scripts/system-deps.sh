#!/usr/bin/env bash
# Debian packages the tests and the simulator need beyond Python: EGL/Mesa for MuJoCo's offscreen
# rendering, cmake/g++ for the interface package, Chromium for the live-view browser test.
# Installs what is missing when run as root; otherwise prints the apt-get command to run.
set -euo pipefail
PKGS=(cmake g++ libegl1 libopengl0 libgl1-mesa-dri chromium)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "[system-deps] installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[system-deps] missing Debian packages: ${missing[*]}" >&2
  echo "[system-deps] run: sudo apt-get install -y ${missing[*]}" >&2
  [ "${LEROBOT_LANG_REQUIRE_SYSTEM_DEPS:-0}" = 1 ] && exit 1
fi
exit 0
