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
# A graph split over two computers (README "Two computers"): the robot's computer keeps shared
# memory between its own nodes and adds UDP to the other; the policy computer has UDP only.
SPLIT_PROFILES = {'robot': 'fastdds_robot_host.xml', 'policy': 'fastdds_udp.xml'}


def shm_profile_path() -> Path:
    """Path of the shipped Fast DDS shared-memory profile."""
    return paths.config_path(SHM_PROFILE)


def ros_environment(base: Mapping[str, str] | None = None, *, domain_id: int | None = None,
                    shared_memory: bool = True, side: str = '') -> dict[str, str]:
    """Return ``base`` (default: os.environ) with this project's DDS defaults filled in.

    Discovery is kept on the machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) unless the caller
    already chose a range; ROS_LOCALHOST_ONLY is ignored by Kilted and so is not relied on.
    ``side`` 'robot' or 'policy': one side of a split graph, whose default profile also (or
    only) speaks UDP; the other computer is reached through ROS_STATIC_PEERS or a wider
    discovery range that the user sets.
    """
    env = dict(os.environ if base is None else base)
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    env.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
    if domain_id is not None:
        env['ROS_DOMAIN_ID'] = str(domain_id)
    else:
        env.setdefault('ROS_DOMAIN_ID', str(DEFAULT_DOMAIN_ID))
    if side:
        env.setdefault('FASTDDS_DEFAULT_PROFILES_FILE',
                       str(paths.config_path(SPLIT_PROFILES[side])))
    elif shared_memory:
        env.setdefault('FASTDDS_DEFAULT_PROFILES_FILE', str(shm_profile_path()))
    return env
