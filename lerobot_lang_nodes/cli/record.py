"""`lerobot-lang record`: record the running graph into rosbag2 bags, or start / stop a
running recorder (`lerobot-lang record start|stop`, what the console's `/record` calls).

`record` with no action runs the `recorder` node in this process until Ctrl-C, which closes
the bag cleanly; every option becomes one of the node's parameters.

`lerobot-lang record-episodes` runs an episodic recording beside a running recorder, as
`lerobot-record` does: a task per episode (published on /task), episode and reset durations,
and keys on stdin (a line each: Enter ends the phase early, r re-records the episode, s / f
label it a success / failure, q stops). Each change goes out on `episode_event`, which the
recorder writes into the bag and `lerobot-lang export --episodes-by marks` cuts at.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from lerobot_lang_nodes import dds

ACTIONS = ('run', 'start', 'stop')


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    if name == 'record-episodes':
        _episode_arguments(p)
        return
    p.add_argument('action', nargs='?', choices=ACTIONS, default='run',
                   help='run (default): record until Ctrl-C; start / stop: call a running '
                        "recorder's ~/start or ~/stop service")
    p.add_argument('--output-dir', default='recordings', help='folder of the bags')
    p.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap',
                   help='rosbag2 storage (default mcap)')
    p.add_argument('--topics', default='',
                   help='comma-separated topics to record instead of the default list')
    p.add_argument('--cameras', default='front,wrist',
                   help='comma-separated cameras whose image_raw and camera_info are recorded')
    p.add_argument('--split-size', type=float, default=0.0, metavar='MB',
                   help='start a new bag every MB megabytes (0: never)')
    p.add_argument('--split-duration', type=float, default=0.0, metavar='SECONDS',
                   help='start a new bag every SECONDS seconds (0: never)')
    p.add_argument('--compress', action='store_true', help='zstd-compress MCAP chunks')
    p.add_argument('--use-sim-time', action='store_true',
                   help='stamp messages with /clock (simulation), as the sim graph runs')
    p.add_argument('--paused', action='store_true',
                   help='wait for `record start` before recording')
    p.add_argument('--namespace', default='', help='namespace of the graph and the recorder')
    p.add_argument('--timeout', type=float, default=10.0,
                   help='start / stop: seconds to wait for the recorder')


def _episode_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument('--task', action='append', required=True,
                   help='task of the episodes; repeat it for a task per episode (the last '
                        'one repeats)')
    p.add_argument('--num-episodes', type=int, default=1, help='episodes to keep (default 1)')
    p.add_argument('--episode-time', type=float, default=60.0, metavar='SECONDS',
                   help='length of an episode (default 60)')
    p.add_argument('--reset-time', type=float, default=60.0, metavar='SECONDS',
                   help='reset phase between episodes (default 60; none after the last)')
    p.add_argument('--namespace', default='', help='namespace of the graph and the recorder')


def _record_episodes(args: argparse.Namespace) -> int:
    import json
    import select

    import rclpy
    from rclpy.duration import Duration
    from std_msgs.msg import String

    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.recording.episodes import (KEYS, EpisodePlan, EpisodeSchedule,
                                                       apply_key)
    try:
        plan = EpisodePlan(tuple(args.task), args.num_episodes, args.episode_time,
                           args.reset_time)
    except ValueError as exc:
        print(f'record-episodes: {exc}', file=sys.stderr)
        return 2
    rclpy.init()
    ns = f'/{args.namespace.strip("/")}' if args.namespace else ''
    node = rclpy.create_node('lerobot_lang_record_episodes')
    events = node.create_publisher(String, f'{ns}/episode_event', qos.COMMAND)
    task = node.create_publisher(String, f'{ns}/task', qos.LATCHED)
    schedule = EpisodeSchedule(plan)
    print('keys, then Enter (Enter alone: n): '
          + ', '.join(f'{k}: {v}' for k, v in KEYS.items()), flush=True)

    def publish(out: list[dict]) -> None:
        for event in out:
            if event['event'] == 'episode':
                task.publish(String(data=event['task']))
            # Stamped: the export cuts at the mark's time, not at its (later) arrival.
            event = {**event, 'stamp': node.get_clock().now().nanoseconds * 1e-9}
            events.publish(String(data=json.dumps(event)))
            print(f"{event['event']} {json.dumps(event)}", flush=True)

    try:
        # The recorder must hear the first mark: wait until it subscribes (it does at once).
        deadline = time.monotonic() + 30.0
        while not events.get_subscription_count() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        if not events.get_subscription_count():
            print(f'error: nobody subscribes to {ns}/episode_event: is a recorder running '
                  '(`lerobot-lang record`, or `sim --record`) in this ROS_DOMAIN_ID?',
                  file=sys.stderr)
            return 2
        publish(schedule.start(time.monotonic()))
        stdin_open = True
        while not schedule.done:
            if stdin_open:
                ready, _, _ = select.select([sys.stdin], [], [], 0.05)
                if ready:
                    line = sys.stdin.readline()
                    if not line:
                        stdin_open = False  # end of input: the timers go on
                    else:
                        publish(apply_key(schedule, line, time.monotonic()))
            else:
                rclpy.spin_once(node, timeout_sec=0.05)
            publish(schedule.tick(time.monotonic()))
        return 0
    except KeyboardInterrupt:
        publish(schedule.stop(time.monotonic()))
        return 0
    finally:
        # Reliable events still queued go out before the node goes.
        events.wait_for_all_acked(Duration(seconds=2.0))
        node.destroy_node()
        rclpy.try_shutdown()


def _param(value: object) -> str:
    """A `-p name:=value` literal (YAML)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, list):
        return '[' + ','.join(repr(v) for v in value) + ']'
    return str(value)


def _ros_args(args: argparse.Namespace) -> list[str]:
    params = {
        'output_dir': os.path.abspath(args.output_dir), 'storage': args.storage,
        'split_size_mb': float(args.split_size), 'split_duration_s': float(args.split_duration),
        'compress': args.compress, 'start_recording': not args.paused,
        'use_sim_time': args.use_sim_time,
    }
    out = ['--ros-args']
    for key, value in params.items():
        out += ['-p', f'{key}:={_param(value)}']
    for key, text in (('topics', args.topics), ('cameras', args.cameras)):
        items = [t for t in text.split(',') if t]
        if items or key == 'cameras':
            out += ['-p', f'{key}:={_param(items or [""])}']
    if args.namespace:
        out += ['-r', f'__ns:=/{args.namespace.strip("/")}']
    return out


def _call(action: str, args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.node import Node
    from std_srvs.srv import Trigger
    rclpy.init()
    node = Node('lerobot_lang_cli_record')
    try:
        ns = f'/{args.namespace.strip("/")}' if args.namespace else ''
        name = f'{ns}/recorder/{action}'
        client = node.create_client(Trigger, name)
        if not client.wait_for_service(timeout_sec=args.timeout):
            print(f'error: service {name} not available: is a recorder running (`lerobot-lang '
                  'record`, or `sim --record`) in this ROS_DOMAIN_ID?', file=sys.stderr)
            return 2
        future = client.call_async(Trigger.Request())
        deadline = time.monotonic() + args.timeout + 30.0
        while not future.done() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        if not future.done():
            print(f'error: {name} did not answer', file=sys.stderr)
            return 2
        reply = future.result()
        print(reply.message)
        return 0 if reply.success else 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def run(name: str, args: argparse.Namespace) -> int:
    os.environ.update(dds.ros_environment())
    if name == 'record-episodes':
        return _record_episodes(args)
    if args.action != 'run':
        return _call(args.action, args)
    from lerobot_lang_nodes.nodes import recorder_node
    return recorder_node.main([sys.argv[0], *_ros_args(args)])


def main(argv: list[str] | None = None) -> int:
    """`python -m lerobot_lang_nodes.cli.record [run|start|stop] [options]`."""
    from lerobot_lang_nodes.cli.main import run_one
    return run_one('record', sys.modules[__name__], argv)


if __name__ == '__main__':
    sys.exit(main())
