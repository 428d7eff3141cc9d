"""ROS parameter names from a params file's nested mappings; ROS-free.

rcl reads a nested mapping under ``ros__parameters`` as dotted names (``lerobot:
{state_units: raw}`` is the parameter ``lerobot.state_units``), and a parameter's value is
never a mapping. The project merges parameters from several sources (params files, robot
YAMLs, launch arguments) in the dotted form, so a group written either way is one parameter.
"""

from __future__ import annotations

from typing import Any


def dotted(values: dict[str, Any], prefix: str = '') -> dict[str, Any]:
    """Nested parameter mappings as dotted names."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(dotted(value, f'{prefix}{key}.'))
        else:
            out[f'{prefix}{key}'] = value
    return out
