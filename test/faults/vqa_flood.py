"""Ask /vqa N times at once from this process; print one JSON line per answer.

Usage: python vqa_flood.py N TIMEOUT_S. Runs in its own process (several at once in tests).
"""

from __future__ import annotations

import json
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from lerobot_lang_msgs.srv import AskVqa


def main() -> int:
    n, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    rclpy.init()
    node = rclpy.create_node('vqa_flood')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    client = node.create_client(AskVqa, 'vqa')
    if not client.wait_for_service(timeout_sec=timeout_s):
        print(json.dumps({'error': 'no /vqa service'}))
        return 1
    # A response can be lost while the server's reply writer has not matched this client yet
    # (DDS discovery races wait_for_service): one answered call first proves the path.
    warm_deadline = time.monotonic() + timeout_s
    while time.monotonic() < warm_deadline:
        warm = client.call_async(AskVqa.Request(question='what is in the gripper?'))
        executor.spin_until_future_complete(warm, timeout_sec=5.0)
        if warm.done():
            break
    start = time.monotonic()
    futures = [client.call_async(AskVqa.Request(question=f'what is in the gripper? ({i})'))
               for i in range(n)]
    done_at: dict[int, float] = {}
    deadline = start + timeout_s
    while len(done_at) < n and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
        for i, f in enumerate(futures):
            if i not in done_at and f.done():
                done_at[i] = time.monotonic() - start
    for i, f in enumerate(futures):
        if i in done_at:
            r = f.result()
            print(json.dumps({'success': r.success, 'message': r.message, 'answer': r.answer,
                              'latency_s': done_at[i]}))
        else:
            print(json.dumps({'success': False, 'message': 'NO ANSWER', 'latency_s': None}))
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
