"""`lerobot-lang calibrate`: LeRobot's SO-101 follower calibration, written as LeRobot JSON."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Mapping

from lerobot_lang_nodes.so101.registers import DEFAULT_BAUDRATE


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--port', required=True,
                        help='serial device of the arm (or the emulator --link path)')
    parser.add_argument('--robot-id', required=True,
                        help='LeRobot robot id; the file is <calibration root>/robots/'
                             'so_follower/<id>.json unless --path is given')
    parser.add_argument('--path', default=None, help='write the calibration JSON here instead')
    parser.add_argument('--baudrate', type=int, default=DEFAULT_BAUDRATE)


def run(command: str, args: argparse.Namespace) -> int:
    from lerobot_lang_nodes.so101.bus import FeetechBus
    from lerobot_lang_nodes.so101.calibration import calibration_path
    from lerobot_lang_nodes.so101.calibration import run_calibration
    from lerobot_lang_nodes.so101.errors import BusError, CalibrationError

    def wait_for_user(message: str) -> None:
        if 'recording' in message:  # recording starts now and stops on Enter (as LeRobot)
            print(f'{message} Press Enter to stop.', flush=True)
            return
        input(f'{message} Press Enter to continue... ')

    shown = {'n': 0}
    enter = threading.Event()
    reader: list[threading.Thread] = []

    def recording_done(positions: Mapping[str, int]) -> bool:
        if not reader:  # a thread blocks on stdin so sampling never waits for the operator
            reader.append(threading.Thread(target=lambda: (sys.stdin.readline(), enter.set()),
                                           daemon=True))
            reader[0].start()
        shown['n'] += 1
        if shown['n'] % 10 == 0:  # a live line at ~5 Hz, not a flood
            text = ' '.join(f'{m}={p}' for m, p in positions.items())
            print(f'\r{text}  (Enter to stop)', end='', flush=True)
        return enter.is_set()

    try:
        bus = FeetechBus.open(args.port, args.baudrate)
    except BusError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    try:
        calibration = run_calibration(bus, wait_for_user, recording_done,
                                      robot_id=args.robot_id, path=args.path)
    except (BusError, CalibrationError) as exc:
        print(f'\nerror: {exc}', file=sys.stderr)
        return 1
    except (KeyboardInterrupt, EOFError):
        print('\ncalibration aborted; nothing written', file=sys.stderr)
        return 1
    finally:
        bus.close()
    print()
    for motor, cal in calibration.items():
        print(f'{motor:>14}: homing_offset={cal.homing_offset:5d} '
              f'range={cal.range_min}..{cal.range_max}')
    print(f'wrote {calibration_path(args.robot_id, args.path)}')
    return 0
