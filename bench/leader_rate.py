"""Benchmark: how fast the SO-101 leader's positions can be read, and what so101_leader publishes.

Usage: python bench/leader_rate.py [--seconds 4] [--port /dev/serial/by-id/...]

Against the servo emulator (`lerobot_lang_nodes.so101.emulator` in a subprocess, on a
pseudo-terminal) by default. THE EMULATOR IS NOT THE REAL BUS: a pty does not pace bytes at the
baud rate and has no USB-serial adapter in the way, so these figures say what the host software
allows, not what the arm's bus allows. The bus itself is bounded by the bytes on the wire, which
are computed here exactly (one SYNC_READ of Present_Position from six servos), plus each
adapter's own USB latency, which only a measurement on the arm gives: ``--port`` runs the bus
figure (read-only: nothing is written, torque is not touched) on a real leader.

Measured, one SYNC_READ per cycle as the node does (every 10th cycle the longer block up to
Present_Temperature, the node's default aux_every_n):

* the bus back to back (FeetechBus.sync_read);
* LeaderHost.cycle() back to back (read, radians, fault check), the node's work per cycle;
* fixed-rate loops on the node's Cadence at 60, 120 and 250 Hz;
* the so101_leader node process at read_hz 60 and 250: /leader/joint_states messages received
  per second by a subscriber (a private ROS domain, discovery LOCALHOST; stopped by its PID).

Writes bench/reports/leader_rate.{json,md} (not with --port: it prints only).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

from bench.harness import write_report
from bench.so101_bus import start_emulator, stop_emulator
from lerobot_lang_nodes.core.control_loop import Cadence
from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.bus import BITS_PER_BYTE, FeetechBus
from lerobot_lang_nodes.so101.calibration import (JOINT_NAMES, MotorCalibration,
                                                  save_calibration)
from lerobot_lang_nodes.so101.robot import So101Config
from lerobot_lang_nodes.so101.errors import BusError
from lerobot_lang_nodes.so101.leader_host import (LeaderHost, LeaderHostConfig,
                                                  So101Leader)
from lerobot_lang_nodes.so101.registers import CONTROL_TABLE

IDS = list(range(1, 7))
BAUD = 1_000_000
AUX_EVERY_N = 10
REPORT_DIR = Path(__file__).resolve().parent / 'reports'
POS = CONTROL_TABLE['Present_Position']
AUX_BYTES = CONTROL_TABLE['Present_Temperature'].address + 1 - POS.address


def wire_bytes() -> dict[str, float]:
    """Bytes on the wire per read cycle: request + six status replies."""
    def one(size: int) -> int:
        return (len(protocol.sync_read_packet(IDS, POS.address, size))
                + len(IDS) * protocol.status_packet_size(size))
    pos, aux = one(POS.size), one(AUX_BYTES)
    mean = ((AUX_EVERY_N - 1) * pos + aux) / AUX_EVERY_N
    return {'positions': pos, 'with_aux': aux, 'mean_aux_every_10': mean}


def percentiles(times: list[float]) -> dict[str, float]:
    arr = np.array(times) * 1e3
    return {'p50_ms': float(np.percentile(arr, 50)), 'p99_ms': float(np.percentile(arr, 99)),
            'max_ms': float(arr.max())}


def bus_rate(bus: FeetechBus, seconds: float) -> dict[str, Any]:
    """SYNC_READ back to back, the aux block every 10th, as the node reads."""
    times, failed, k = [], 0, 0
    end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < end:
        try:
            bus.sync_read_bytes(IDS, POS.address, AUX_BYTES if k % AUX_EVERY_N == 0 else POS.size,
                                check_errors=False)
        except BusError:
            failed += 1
        k += 1
        times.append(time.perf_counter() - t0)
    return {'reads': len(times), 'failed': failed, 'rate_hz': len(times) / sum(times),
            **percentiles(times)}


def host_rate(host: LeaderHost, seconds: float) -> dict[str, Any]:
    times = []
    end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < end:
        host.cycle()
        times.append(time.perf_counter() - t0)
    return {'cycles': len(times), 'rate_hz': len(times) / sum(times), **percentiles(times)}


def fixed_rate(host: LeaderHost, hz: float, seconds: float) -> dict[str, Any]:
    """The node's loop: one host cycle per slot of a Cadence, missed slots skipped."""
    reads0 = host.reads
    cadence = Cadence(hz, time.monotonic())
    works = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.perf_counter()
        host.cycle()
        works.append(time.perf_counter() - t0)
        time.sleep(cadence.delay(time.monotonic()))
    elapsed = time.monotonic() - start
    return {'hz': hz, 'reads_per_s': (host.reads - reads0) / elapsed,
            'overruns': cadence.overruns, 'skipped_slots': cadence.skipped_slots,
            **{f'cycle_{k}': v for k, v in percentiles(works).items()}}


def node_rates(port: str, cal: Path, rates: list[float], seconds: float,
               tmp: Path) -> list[dict[str, Any]]:
    """so101_leader at each read_hz: joint_states received per second by a subscriber."""
    from diagnostic_msgs.msg import DiagnosticArray
    from domain_coordinator import domain_id
    from sensor_msgs.msg import JointState

    from lerobot_lang_nodes import dds
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import NodeProcess, node_command, RosProbe, wait_until
    out = []
    with domain_id() as domain:
        os.environ.update(dds.ros_environment(domain_id=domain),
                          ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
        os.environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
        probe = RosProbe('leader_rate_probe')
        try:
            for hz in rates:
                joints = probe.subscribe(JointState, f'/bench{int(hz)}/joint_states',
                                         qos.SENSOR)
                diag = probe.subscribe(DiagnosticArray, '/diagnostics', qos.STATUS)
                proc = NodeProcess(f'so101_leader_{int(hz)}', node_command(
                    'lerobot_lang_nodes.nodes.so101_leader_node', '-r',
                    f'__node:=leader{int(hz)}', params={
                        'port': port, 'calibration_path': str(cal), 'read_hz': hz,
                        'joint_states_topic': f'/bench{int(hz)}/joint_states',
                        'diagnostics_hz': 1.0}), tmp / f'leader_{int(hz)}.log')
                try:
                    wait_until(lambda: len(joints) > 0 or not proc.alive, 60.0,
                               'the first joint_states', [proc])
                    time.sleep(1.0)  # warm-up: discovery, the first slots
                    n0, t0 = len(joints), time.monotonic()
                    time.sleep(seconds)  # the measurement window
                    n1, t1 = len(joints), time.monotonic()
                    reported = None
                    for msg in reversed(diag.snapshot()):
                        for s in msg.status:
                            if s.name == 'so101_leader: arm':
                                reported = {kv.key: kv.value for kv in s.values}
                                break
                        if reported:
                            break
                    out.append({'read_hz': hz, 'received_hz': (n1 - n0) / (t1 - t0),
                                'node_read_rate_hz': float((reported or {}).get(
                                    'read_rate_hz', 'nan')),
                                'overruns': int((reported or {}).get('loop.overruns', -1)),
                                'skipped_slots': int((reported or {}).get(
                                    'loop.skipped_slots', -1)),
                                'scheduling': (reported or {}).get('loop.scheduling', '?')})
                finally:
                    proc.stop()
                print(json.dumps(out[-1]), flush=True)
        finally:
            probe.close()
    return out


def markdown(report: dict[str, Any]) -> str:
    w = report['wire']
    bound = report['bound']
    lines = [
        '# SO-101 leader read rate', '',
        f"{report['machine']}, load average (1 min) {report['load_average_1min'][0]} before, "
        f"{report['load_average_1min'][1]} after (other work shared the machine); "
        f"{report['date']}. **Measured against the pty servo emulator, not "
        'the real bus**: a pty does not pace bytes at the baud rate and has no USB-serial '
        "adapter, so the measured rates are the host software's limit; the bus's own limit is "
        'the computed wire time below plus the adapter\'s USB latency (measure it on the arm: '
        '`bench/leader_rate.py --port /dev/...`, read-only).', '',
        '| figure | value |', '|---|---|',
        f"| wire bytes per read (SYNC_READ Present_Position x6 + 6 replies) | "
        f"{w['positions']} B = {w['positions'] * BITS_PER_BYTE / BAUD * 1e6:.0f} us at 1 Mbaud |",
        f"| ... with velocity..temperature (every {AUX_EVERY_N}th read) | {w['with_aux']} B = "
        f"{w['with_aux'] * BITS_PER_BYTE / BAUD * 1e6:.0f} us |",
        f"| wire-time bound on the read rate (mean of the mix) | {bound['rate_hz']:.0f} Hz |",
        f"| bus, back to back (emulator) | {report['bus']['rate_hz']:.0f} Hz, p50 "
        f"{report['bus']['p50_ms']:.3f} ms, p99 {report['bus']['p99_ms']:.3f} ms, failed "
        f"{report['bus']['failed']} |",
        f"| LeaderHost.cycle, back to back (emulator) | {report['host']['rate_hz']:.0f} Hz, p50 "
        f"{report['host']['p50_ms']:.3f} ms, p99 {report['host']['p99_ms']:.3f} ms |",
    ]
    for row in report['fixed_rate']:
        lines.append(f"| Cadence loop at {row['hz']:.0f} Hz (emulator) | "
                     f"{row['reads_per_s']:.1f} reads/s, cycle p99 {row['cycle_p99_ms']:.2f} ms,"
                     f" overruns {row['overruns']}, skipped slots {row['skipped_slots']} (normal "
                     'scheduling) |')
    for row in report['node']:
        lines.append(f"| so101_leader node, read_hz {row['read_hz']:.0f} (emulator, DDS) | "
                     f"{row['received_hz']:.1f} joint_states/s received, the node reports "
                     f"{row['node_read_rate_hz']:.1f} reads/s; since its start overruns "
                     f"{row['overruns']}, skipped slots {row['skipped_slots']}, read thread "
                     f"{row['scheduling']} |")
    lines += ['', 'The default `read_hz` is 60 (LeRobot teleoperation\'s 60 fps, twice the '
              "follower's 30 Hz control rate).", '']
    return '\n'.join(lines)


def measure_port(port: str, seconds: float) -> int:
    """A real leader's bus, read-only: Return_Delay_Time as found, then the read rate."""
    bus = FeetechBus.open(port, BAUD)
    try:
        delays = {i: bus.read(i, 'Return_Delay_Time', check_errors=False) for i in IDS}
        bus.return_delay_us = 2.0 * max(delays.values())
        rate = bus_rate(bus, seconds)
    finally:
        bus.close()
    print(json.dumps({'port': port, 'return_delay_time': delays, 'bus': rate,
                      'bus_stats': bus.stats.as_dict()}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=4.0, help='each measurement')
    parser.add_argument('--port', help='a real leader arm (read-only bus figure only)')
    parser.add_argument('--node-rates', type=lambda t: [float(x) for x in t.split(',')],
                        default=[60.0, 250.0])
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    if args.port:
        return measure_port(args.port, args.seconds)
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix='leader_rate_'))
    handle, port = start_emulator(False, tmp / 'leader')
    try:
        cal = {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                   4095 if j == 'wrist_roll' else 3000)
               for i, j in enumerate(JOINT_NAMES)}
        cal_file = save_calibration(cal, path=tmp / 'leader.json')
        host = LeaderHost(lambda: So101Leader(So101Config(port=port, calibration=cal)),
                          LeaderHostConfig(port=port))
        problem = host.configure()  # return delay 0 etc., exactly what the node does
        if problem:
            raise SystemExit(f'configure failed: {problem}')
        bus = host.leader.bus
        bus_figures = bus_rate(bus, args.seconds)
        host_figures = host_rate(host, args.seconds)
        loops = [fixed_rate(host, hz, args.seconds) for hz in (60.0, 120.0, 250.0)]
        host.close()
        stats = bus.stats.as_dict()
        node = node_rates(port, cal_file, args.node_rates, args.seconds, tmp)
    finally:
        stop_emulator(handle)
        shutil.rmtree(tmp, ignore_errors=True)
    wire = wire_bytes()
    bound_s = wire['mean_aux_every_10'] * BITS_PER_BYTE / BAUD
    report = {'machine': f'{platform.machine()}, {os.cpu_count()} cores, Python '
                         f'{platform.python_version()}',
              'date': time.strftime('%Y-%m-%d'), 'emulator': 'subprocess (pty)',
              'load_average_1min': [round(load_before, 2), round(os.getloadavg()[0], 2)],
              'seconds': args.seconds, 'wire': wire,
              'bound': {'baud': BAUD, 'read_us': bound_s * 1e6, 'rate_hz': 1.0 / bound_s},
              'bus': bus_figures, 'host': host_figures, 'fixed_rate': loops, 'node': node,
              'bus_stats': stats}
    write_report(args.out, 'leader_rate', report, markdown(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
