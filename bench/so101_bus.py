"""Benchmark: SO-101 control-loop rate and jitter against the pty servo emulator."""

# One cycle = SYNC_READ Present_Position of 6 servos + SYNC_WRITE Goal_Position, as the driver
# node does per control tick. The physical bound is the time those bytes take on a 1 Mbaud
# line (return delay 0, as the driver configures), so rate / bound says how much of the real
# bus a pty + Python round trip leaves on the table.

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.bus import BITS_PER_BYTE, FeetechBus
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration
from lerobot_lang_nodes.so101.robot import So101Config, So101Robot
from lerobot_lang_nodes.so101.emulator import ServoBusEmulator
from lerobot_lang_nodes.so101.errors import BusError
from lerobot_lang_nodes.so101.registers import CONTROL_TABLE

IDS = list(range(1, 7))
BAUD = 1_000_000
REPORT_DIR = Path(__file__).resolve().parent / 'reports'


def cycle_bytes() -> dict[str, int]:
    """Bytes on the wire for one control cycle."""
    pos = CONTROL_TABLE['Present_Position']
    read_req = len(protocol.sync_read_packet(IDS, pos.address, pos.size))
    read_rep = len(IDS) * protocol.status_packet_size(pos.size)
    write = len(protocol.sync_write_packet(42, 2, {i: b'\x00\x08' for i in IDS}))
    return {'sync_read_request': read_req, 'status_replies': read_rep, 'sync_write': write,
            'total': read_req + read_rep + write}


def start_emulator(in_process: bool, link: Path) -> tuple[object, str]:
    """Emulator in a subprocess by default, so it does not share the GIL with the loop."""
    if in_process:
        emu = ServoBusEmulator(IDS, link=link).start()
        return emu, emu.port
    proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.so101.emulator',
                             '--link', str(link), '--ids', '1..6', '--log-level', 'WARNING'])
    deadline = time.monotonic() + 10.0
    while not link.is_symlink():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f'emulator did not publish {link} (exit code {proc.poll()})')
        time.sleep(0.01)
    return proc, str(link)


def stop_emulator(handle: object) -> None:
    if isinstance(handle, ServoBusEmulator):
        handle.stop()
    else:
        handle.terminate()
        handle.wait(timeout=10)


def max_rate(bus: FeetechBus, duration_s: float) -> dict[str, float]:
    """Back-to-back cycles for `duration_s`."""
    goal = {i: 2048 for i in IDS}
    times = []
    failed = 0
    end = time.perf_counter() + duration_s
    while True:
        t0 = time.perf_counter()
        if t0 >= end:
            break
        try:
            bus.sync_read(IDS, 'Present_Position')
            bus.sync_write('Goal_Position', goal)
        except BusError:  # counted by the bus; the loop goes on as the node's would
            failed += 1
        times.append(time.perf_counter() - t0)
    arr = np.array(times)
    return {'cycles': len(arr), 'failed_cycles': failed, 'rate_hz': len(arr) / arr.sum(),
            'cycle_p50_ms': float(np.percentile(arr, 50) * 1e3),
            'cycle_p99_ms': float(np.percentile(arr, 99) * 1e3)}


def robot_rate(robot: So101Robot, duration_s: float) -> dict[str, float]:
    """read_state + write_goal (with limits and max_relative_target) back to back."""
    goal = np.zeros(len(JOINT_NAMES))
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        try:
            robot.read_state()
            robot.write_goal(goal)
        except BusError:
            pass
        n += 1
    return {'cycles': n, 'rate_hz': n / (time.perf_counter() - t0)}


def jitter(bus: FeetechBus, hz: float, duration_s: float) -> dict[str, float]:
    """Fixed-rate loop on absolute deadlines; period error and cycle time percentiles."""
    period = 1.0 / hz
    goal = {i: 2048 for i in IDS}
    starts, works = [], []
    failed = 0
    t0 = time.perf_counter()
    n = int(duration_s * hz)
    for k in range(n):
        wake = t0 + k * period
        delay = wake - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # a timer, as the node's control timer
        start = time.perf_counter()
        try:
            bus.sync_read(IDS, 'Present_Position')
            bus.sync_write('Goal_Position', goal)
        except BusError:
            failed += 1
        works.append(time.perf_counter() - start)
        starts.append(start)
    periods = np.diff(np.array(starts))
    err = np.abs(periods - period) * 1e3
    late = (np.array(starts) - (t0 + np.arange(n) * period)) * 1e3
    return {'hz': hz, 'cycles': n,
            'period_p50_ms': float(np.percentile(periods, 50) * 1e3),
            'period_p99_ms': float(np.percentile(periods, 99) * 1e3),
            'jitter_p50_ms': float(np.percentile(err, 50)),
            'jitter_p99_ms': float(np.percentile(err, 99)),
            'start_late_p99_ms': float(np.percentile(late, 99)),
            'cycle_p50_ms': float(np.percentile(works, 50) * 1e3),
            'cycle_p99_ms': float(np.percentile(works, 99) * 1e3),
            'overruns': int(np.sum(np.array(works) > period)), 'failed_cycles': failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rate-s', type=float, default=3.0, help='max-rate run length')
    parser.add_argument('--jitter-s', type=float, default=4.0, help='each fixed-rate run')
    parser.add_argument('--in-process', action='store_true',
                        help='run the emulator on a thread of this process (shares the GIL)')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix='so101_bench_'))
    handle, port = start_emulator(args.in_process, tmp / 'so101')
    try:
        cal = {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                   4095 if j == 'wrist_roll' else 3000)
               for i, j in enumerate(JOINT_NAMES)}
        robot = So101Robot(So101Config(port=port, calibration=cal, max_relative_target_rad=0.2,
                                       present_max_age_s=0.05))
        robot.connect()  # return delay 0 etc., exactly what the driver does
        robot.enable_torque()
        bus = robot.bus
        nbytes = cycle_bytes()
        bound_s = nbytes['total'] * BITS_PER_BYTE / BAUD
        rate = max_rate(bus, args.rate_s)
        rrate = robot_rate(robot, min(args.rate_s, 2.0))
        jit = [jitter(bus, hz, args.jitter_s) for hz in (30.0, 50.0)]
        robot.close()
        stats = bus.stats.as_dict()
    finally:
        stop_emulator(handle)
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()

    report = {
        'machine': {'python': platform.python_version(), 'cpus': os.cpu_count(),
                    'platform': platform.platform()},
        'emulator': 'thread' if args.in_process else 'subprocess',
        'cycle_bytes': nbytes,
        'physical_bound': {'baud': BAUD, 'cycle_us': bound_s * 1e6, 'rate_hz': 1.0 / bound_s},
        'max_rate': {**rate, 'ratio_to_bound': rate['rate_hz'] * bound_s},
        'robot_rate': rrate,
        'jitter': jit,
        'bus_stats': stats,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'so101_bus.json').write_text(json.dumps(report, indent=2))
    lines = [
        '# SO-101 bus benchmark (pty emulator)', '',
        f"Emulator: {report['emulator']}; {report['machine']['cpus']} CPUs, Python "
        f"{report['machine']['python']}.", '',
        f"Cycle = SYNC_READ Present_Position x6 + SYNC_WRITE Goal_Position x6 = "
        f"{nbytes['total']} bytes ({nbytes['sync_read_request']} + {nbytes['status_replies']} "
        f"+ {nbytes['sync_write']}).", '',
        '| figure | value |', '|---|---|',
        f"| physical bound at 1 Mbaud | {bound_s * 1e6:.0f} us/cycle = "
        f"{1 / bound_s:.0f} Hz |",
        f"| achieved (bus, back to back) | {rate['rate_hz']:.0f} Hz, cycle p50 "
        f"{rate['cycle_p50_ms']:.3f} ms, p99 {rate['cycle_p99_ms']:.3f} ms |",
        f"| ratio achieved / bound | {rate['rate_hz'] * bound_s:.2f} (the pty does not pace "
        "bytes at the baud rate: > 1 means host software is not the bottleneck, < 1 that it "
        "is) |",
        f"| So101Robot read_state + write_goal | {rrate['rate_hz']:.0f} Hz |",
    ]
    for j in jit:
        lines.append(f"| {j['hz']:.0f} Hz loop | period p50 {j['period_p50_ms']:.2f} ms, "
                     f"jitter p50 {j['jitter_p50_ms']:.3f} ms / p99 {j['jitter_p99_ms']:.3f} ms,"
                     f" cycle p99 {j['cycle_p99_ms']:.3f} ms, overruns {j['overruns']} |")
    lines += ['', f"Bus counters: timeouts {stats['timeouts']}, checksum errors "
              f"{stats['checksum_errors']}, retries {stats['retries']}, stale replies "
              f"{stats['stale_replies']}, failed transactions {stats['failures']} (the emulator "
              "is fault-free here: any of these are late replies under CPU load; see "
              "max_rate.cycle_p99_ms).", '']
    (args.out / 'so101_bus.md').write_text('\n'.join(lines))
    sys.stdout.write('\n'.join(lines) + '\n')
    return 0 if math.isfinite(rate['rate_hz']) else 1


if __name__ == '__main__':
    sys.exit(main())
