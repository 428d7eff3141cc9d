"""`lerobot-lang pedal DEVICE`: a USB foot switch (or any key) takes over and hands back.

The device is a Linux input device (`/dev/input/by-id/usb-...-event-kbd`, core/pedal.py); a
pressed key calls `/takeover` or `/handback` on the running graph, as `lerobot-lang
takeover` does. Never required: the console keys and the services work without it. An
unplugged pedal is waited for and picked up again when it comes back.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import select
import signal
import sys
import threading

from lerobot_lang_nodes.core.pedal import EVIOCGRAB, EventReader, PedalMap, key_names

REOPEN_S = 1.0
SERVICE_WAIT_S = 10.0


def add_arguments(_command: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument('device', help='the pedal\'s input device, e.g. '
                        '/dev/input/by-id/usb-PCsensor_FootSwitch-event-kbd')
    parser.add_argument('--toggle', action='append', metavar='KEY',
                        help='a key that takes over, or hands back in run mode teleop '
                        '(repeatable; default b, the factory key of single-pedal switches, '
                        'unless --takeover / --handback are given)')
    parser.add_argument('--takeover', action='append', metavar='KEY',
                        help='a key that only takes over (repeatable; e.g. a left pedal: a)')
    parser.add_argument('--handback', action='append', metavar='KEY',
                        help='a key that only hands back (repeatable; e.g. a right pedal: c)')
    parser.add_argument('--no-grab', action='store_true',
                        help='leave the device to other programs too (by default its keys '
                        'reach only this command)')
    parser.add_argument('--namespace', default='', help='namespace of the graph (default /)')


def _open(path: str, grab: bool) -> int:
    """The device opened non-blocking (and grabbed); OSError if it cannot be."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if grab:
        try:
            fcntl.ioctl(fd, EVIOCGRAB, 1)
        except OSError as exc:
            # Not an evdev device (a FIFO in tests, a plain file): read it as it is.
            if exc.errno not in (errno.ENOTTY, errno.EINVAL):
                os.close(fd)
                raise
    return fd


def run(_command: str, args: argparse.Namespace) -> int:
    try:
        mapping = PedalMap.from_names(args.toggle, args.takeover, args.handback)
    except ValueError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    from lerobot_lang_nodes import dds
    os.environ.update(dds.ros_environment())
    import rclpy
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions
    from std_srvs.srv import Trigger

    from lerobot_lang_msgs.msg import RuntimeStatus
    from lerobot_lang_nodes.nodes import qos

    ns = args.namespace.rstrip('/')
    # Ctrl-C / SIGTERM only set a flag the loop checks: a KeyboardInterrupt raised inside
    # rclpy's executor could be lost there and leave the command running.
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = Node('lerobot_lang_pedal')
    mode = {'now': ''}
    node.create_subscription(
        RuntimeStatus, f'{ns}/runtime_status' if ns else 'runtime_status',
        lambda m: mode.__setitem__('now', m.mode), qos.STATUS)
    clients = {name: node.create_client(Trigger, f'{ns}/{name}' if ns else name)
               for name in ('takeover', 'handback')}
    names = key_names()

    def call(action: str) -> None:
        client = clients[action]
        if not client.wait_for_service(timeout_sec=SERVICE_WAIT_S):
            print(f'{action}: no /{action} service (is the graph running in ROS_DOMAIN_ID='
                  f'{os.environ.get("ROS_DOMAIN_ID")}?)', flush=True)
            return
        future = client.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=SERVICE_WAIT_S + 20.0)
        reply = future.result()
        if reply is None:
            print(f'{action}: no answer', flush=True)
            return
        print(f'{action}: {"ok" if reply.success else "refused"}: {reply.message}', flush=True)
        if reply.success:  # the next toggle must not wait for the status to say so
            mode['now'] = 'teleop' if action == 'takeover' else 'action'

    print(f'pedal {args.device}: ' + ', '.join(
        f'{names.get(c, c)} -> {action}' for action in ('toggle', 'takeover', 'handback')
        for c in getattr(mapping, action)) + ' (Ctrl-C ends)', flush=True)
    fd = -1
    reader = EventReader()
    said_missing = False
    try:
        while rclpy.ok() and not stopping.is_set():
            if fd < 0:
                try:
                    fd = _open(args.device, grab=not args.no_grab)
                except PermissionError:
                    print(f'error: no permission to read {args.device}: add yourself to its '
                          'group (ls -l shows it; usually `input`) or a udev rule, then log in '
                          'again', file=sys.stderr)
                    return 2
                except OSError as exc:
                    if not said_missing:
                        print(f'pedal {args.device} not there ({exc.strerror}); waiting for '
                              'it', flush=True)
                        said_missing = True
                    rclpy.spin_once(node, timeout_sec=REOPEN_S)
                    continue
                if said_missing:
                    print(f'pedal {args.device} connected', flush=True)
                said_missing, reader = False, EventReader()
            rclpy.spin_once(node, timeout_sec=0.0)
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                continue
            except OSError:  # ENODEV: unplugged
                data = b''
            if not data:
                os.close(fd)
                fd = -1
                print(f'pedal {args.device} unplugged; waiting for it', flush=True)
                said_missing = True
                rclpy.spin_once(node, timeout_sec=REOPEN_S)
                continue
            for ev_type, code, value in reader.feed(data):
                action = mapping.action(ev_type, code, value, mode['now'])
                if action is not None:
                    call(action)
    except KeyboardInterrupt:
        return 0
    finally:
        if fd >= 0:
            os.close(fd)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
