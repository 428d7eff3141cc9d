"""An unexpected exception in the simulation loop: hold, ERROR on /diagnostics, loop alive."""

from __future__ import annotations

import sys

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rosgraph_msgs.msg import Clock
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_nodes.nodes import qos

# The node as shipped, with a cycle that raises an unexpected type once (cycle 20).
FAULTY_SIM = '''
import itertools, sys
from lerobot_lang_nodes.nodes import runner, sim_bridge_node
from lerobot_lang_nodes.testing import with_cycle_fault

cycles = itertools.count(1)

def fault(node):
    if next(cycles) == 20:
        raise KeyError('injected fault')

sys.exit(runner.run(with_cycle_fault(sim_bridge_node.SimBridgeNode, fault), sys.argv[1:],
                    name='sim_bridge'))
'''


def sim_time(msg: Clock) -> float:
    return msg.clock.sec + msg.clock.nanosec * 1e-9


def test_sim_loop_survives_an_unexpected_exception(launch_node, probe):
    diags = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    clock = probe.subscribe(Clock, '/clock', qos.CLOCK)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    node = launch_node.command(
        [sys.executable, '-c', FAULTY_SIM, '--ros-args', '-p', 'cameras:=["front"]',
         '-p', 'image_width:=32', '-p', 'image_height:=24'], name='sim_bridge')

    def error_status(arr: DiagnosticArray) -> bool:
        return any(s.level == DiagnosticStatus.ERROR and 'injected fault' in s.message
                   for s in arr.status)

    try:
        diags.wait_for(error_status, timeout_s=60.0, what='ERROR with the injected fault')
        paused = status.wait_for(lambda m: m.mode == 'paused', timeout_s=10.0,
                                 what='paused runtime status')
        assert paused.queue_depth == 0
        # The loop is alive: simulated time keeps advancing after the error.
        t0 = sim_time(clock.wait_for(timeout_s=5.0, what='clock', since=len(clock)))
        clock.wait_for(lambda m: sim_time(m) > t0 + 0.5, timeout_s=20.0,
                       what='clock advancing after the error')
        assert node.alive
        assert probe.call(Trigger, 'resume', Trigger.Request()).success
        status.wait_for(lambda m: m.mode == 'action', timeout_s=10.0, what='resumed',
                        since=len(status))
        diags.wait_for(lambda a: any(s.level == DiagnosticStatus.OK and 'sim_bridge' in s.name
                                     for s in a.status), timeout_s=10.0, what='OK again',
                       since=len(diags))
    except AssertionError:
        print(node.log_text(tail=3000))
        raise
