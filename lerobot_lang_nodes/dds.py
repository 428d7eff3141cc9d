"""DDS environment defaults: discovery on loopback, a private domain, shared-memory transport."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lerobot_lang_nodes import paths

# Used when ROS_DOMAIN_ID is unset, so the bring-up and the operator commands meet in one domain
# that is not the ROS default 0 other software on the machine may use.
DEFAULT_DOMAIN_ID = 31
SHM_PROFILE = 'fastdds_shm.xml'


def shm_profile_path() -> Path:
    """Path of the shipped Fast DDS shared-memory profile."""
    return paths.config_path(SHM_PROFILE)


def ros_environment(base: Mapping[str, str] | None = None, *, domain_id: int | None = None,
                    shared_memory: bool = True) -> dict[str, str]:
    """Return ``base`` (default: os.environ) with this project's DDS defaults filled in.

    Discovery is kept on the machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) unless the caller
    already chose a range; ROS_LOCALHOST_ONLY is ignored by Kilted and so is not relied on.
    """
    env = dict(os.environ if base is None else base)
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    env.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
    if domain_id is not None:
        env['ROS_DOMAIN_ID'] = str(domain_id)
    else:
        env.setdefault('ROS_DOMAIN_ID', str(DEFAULT_DOMAIN_ID))
    if shared_memory:
        env.setdefault('FASTDDS_DEFAULT_PROFILES_FILE', str(shm_profile_path()))
    return env
