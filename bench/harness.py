"""What every benchmark shares: where reports go and how they are written, percentiles, a
private ROS domain for the graphs a benchmark starts, NODE.PARAM=VALUE overrides."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
REPORT_DIR = BENCH / 'reports'


def write_report(out: Path, name: str, report: dict[str, Any], text: str,
                 echo: bool = True) -> None:
    """out/NAME.json and out/NAME.md (the Markdown ``text``, also printed unless ``echo`` is
    False: a script that printed its tables as it went)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f'{name}.json').write_text(json.dumps(report, indent=2) + '\n', encoding='utf-8')
    (out / f'{name}.md').write_text(text if text.endswith('\n') else text + '\n',
                                    encoding='utf-8')
    if echo:
        sys.stdout.write(text.rstrip('\n') + '\n')
    sys.stdout.write(f"reports: {out / f'{name}.json'}, {out / f'{name}.md'}\n")


def percentiles(values: list[float] | np.ndarray, scale: float = 1.0) -> dict[str, Any]:
    """min / p50 / p99 / max of ``values`` * ``scale``, rounded; None entries when there is no
    data."""
    arr = np.asarray(values, dtype=np.float64) * scale
    if arr.size == 0:
        return {'min': None, 'p50': None, 'p99': None, 'max': None, 'n': 0}
    return {'min': round(float(arr.min()), 3), 'p50': round(float(np.percentile(arr, 50)), 3),
            'p99': round(float(np.percentile(arr, 99)), 3),
            'max': round(float(arr.max()), 3), 'n': int(arr.size)}


def median(values: list[float | None]) -> float | None:
    """Median of the values that are not None, rounded; None when there are none."""
    done = [v for v in values if v is not None]
    return round(statistics.median(done), 3) if done else None


@contextmanager
def private_ros_domain() -> Iterator[int]:
    """Reserve a free ROS_DOMAIN_ID and set this process's DDS environment for the duration.

    Call it before rclpy is imported anywhere: the probe in this process and every node
    process (started with ``dict(os.environ)``) share the domain, discovery stays on loopback
    (forced, even if set otherwise) and nothing else on the machine sees them. SIGTERM takes
    the same clean path as Ctrl-C, so every node is stopped by its PID. Yields the domain id.
    """
    from domain_coordinator import domain_id

    from lerobot_lang_nodes import dds
    with domain_id() as domain:
        env = dds.ros_environment(domain_id=domain)
        env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
        env['MUJOCO_GL'] = 'egl'
        env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
        os.environ.update(env)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        yield domain


def parse_override(text: str) -> tuple[str, str, Any]:
    """'node.name=value' (value parsed as YAML) -> (node, name, value)."""
    key, sep, raw = text.partition('=')
    node, dot, name = key.partition('.')
    if not sep or not dot or not node or not name:
        raise argparse.ArgumentTypeError(f'expected NODE.PARAM=VALUE, got {text!r}')
    return node, name, yaml.safe_load(raw)
