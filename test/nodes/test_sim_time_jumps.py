"""A node under use_sim_time stays idle when /clock jumps back and forth.

Two simulators in one domain (or one restarted) make sim time jump backwards. A timer on the
node's ROS clock then makes rclpy's executor spin without sleeping (measured: a whole core per
node), which starves the simulator and cascades into every node of the graph. Periodic work
that is not about sim time (diagnostics) therefore runs on the steady clock.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from rosgraph_msgs.msg import Clock as ClockMsg

from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import wait_until

CLK_TCK = os.sysconf('SC_CLK_TCK')


def _cpu_s(pid: int) -> float:
    text = Path(f'/proc/{pid}/stat').read_text()
    fields = text[text.rindex(')') + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def test_planner_stays_idle_while_sim_time_jumps(launch_node, probe) -> None:
    planner = launch_node('lerobot_lang_nodes.nodes.planner_node', '-r', '__node:=planner',
                          '-p', 'use_sim_time:=true', '-p', 'diagnostics_period_s:=0.5')
    probe.wait_for_node('planner', timeout_s=30.0, processes=[planner])
    # Start-up work (imports, the backend) must not count in the measured share.
    wait_until(lambda: 'planner ready' in planner.log_text(20000), 30.0, 'the planner ready',
               [planner])
    # Two writers, as two simulators would be, each with its own timeline.
    clocks = [probe.publisher(ClockMsg, '/clock', qos.CLOCK) for _ in range(2)]
    wait_until(lambda: all(c.get_subscription_count() > 0 for c in clocks), 15.0,
               'the planner on /clock', [planner])
    stop = threading.Event()

    def two_timelines() -> None:
        t = 0.0
        while not stop.is_set():
            t += 1.0 / 30.0  # two simulators at the default ctrl_hz
            for base, clock in zip((1000.0, 5.0), clocks):  # each message jumps ~995 s
                msg = ClockMsg()
                msg.clock.sec, msg.clock.nanosec = int(base + t), int(((base + t) % 1) * 1e9)
                clock.publish(msg)
            stop.wait(1.0 / 30.0)  # the clocks' own period, not a wait for a condition

    thread = threading.Thread(target=two_timelines, daemon=True)
    thread.start()
    try:
        cpu0, wall0 = _cpu_s(planner.pid), time.monotonic()
        time.sleep(5.0)  # the measurement window of a CPU share, not a wait for a condition
        share = (_cpu_s(planner.pid) - cpu0) / (time.monotonic() - wall0)
    finally:
        stop.set()
        thread.join(timeout=5.0)
    assert planner.alive, planner.log_text(2000)
    # 60 /clock messages a second cost some % of a core; a spinning executor costs ~100 %.
    assert share < 0.5, f'planner used {share:.0%} of a core while sim time jumped'
