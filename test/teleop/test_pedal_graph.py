"""`lerobot-lang pedal` over DDS: a foot switch's key events switch the MuJoCo sim_bridge between
the policy and the human, through the same /takeover and /handback services a console uses.

The pedal is a FIFO carrying the kernel's own input-event records (what /dev/input/eventN
hands out: no uinput in these machines), written as a USB foot switch sends them: scan code,
key down, sync, then auto-repeat while it is held, key up. Unplugging removes the device node,
as the kernel does.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_nodes.core.pedal import EV_KEY, PRESS, RELEASE, REPEAT, encode, key_code
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command, wait_until

SIM = 'lerobot_lang_nodes.nodes.sim_bridge_node'
WAIT_S = 30.0  # two shared, loaded cores
EV_SYN, EV_MSC = 0x00, 0x04
B = key_code('b')


def pedal_down(code: int = B, repeats: int = 0) -> bytes:
    return encode([(EV_MSC, 4, 0x70005), (EV_KEY, code, PRESS), (EV_SYN, 0, 0)]
                  + [(EV_KEY, code, REPEAT), (EV_SYN, 0, 0)] * repeats
                  + [(EV_MSC, 4, 0x70005), (EV_KEY, code, RELEASE), (EV_SYN, 0, 0)])


class Device:
    """The pedal's device node: a FIFO this test writes input events into."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def plug(self, processes) -> None:
        os.mkfifo(self.path)

        def opened() -> bool:  # a FIFO opens for writing once its reader has it open
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                return False
            return True
        wait_until(opened, WAIT_S, 'the pedal command opening the device', processes)

    def send(self, data: bytes) -> None:
        assert os.write(self.fd, data) == len(data)

    def unplug(self) -> None:
        self.path.unlink()  # first, as the kernel removes the node: no reopen finds it
        os.close(self.fd)
        self.fd = -1


@pytest.fixture
def rig(tmp_path: Path):
    probe = RosProbe('pedal_probe')
    sim = NodeProcess('sim_bridge', node_command(SIM, params={
        'cameras': ['front'], 'image_width': 32, 'image_height': 24, 'camera_hz': 2.0,
        'status_hz': 10.0, 'leader_timeout_s': 0.3}), tmp_path / 'sim_bridge.log')
    device = Device(tmp_path / 'event-kbd')
    pedal = NodeProcess('pedal', [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'pedal',
                                  str(device.path)], tmp_path / 'pedal.log')
    status = probe.subscribe(RuntimeStatus, '/runtime_status', qos.STATUS)
    try:
        status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_ACTION, timeout_s=90.0,
                        what='sim_bridge acting')
        yield sim, pedal, device, status
    except BaseException:
        print(sim.log_text(3000), pedal.log_text(3000))
        raise
    finally:
        if device.fd >= 0:
            os.close(device.fd)
        pedal.stop()
        sim.stop()
        probe.close()


def lines(pedal: NodeProcess, start: str) -> list[str]:
    return [ln for ln in pedal.log_text().splitlines() if ln.startswith(start)]


def test_the_pedal_takes_over_hands_back_and_survives_an_unplug(rig):
    sim, pedal, device, status = rig
    procs = [sim, pedal]
    # Not there yet: the command waits for it instead of failing (a pedal is never required).
    wait_until(lambda: lines(pedal, 'pedal ') and 'waiting for it' in pedal.log_text(), WAIT_S,
               'the pedal command saying it waits for the device', procs)
    device.plug(procs)
    n = len(status)
    device.send(pedal_down())
    status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_TELEOP, timeout_s=WAIT_S,
                    what='teleop after a pedal press', since=n)
    wait_until(lambda: lines(pedal, 'takeover: ok'), WAIT_S, 'the takeover reported', procs)

    # Held down: key down, twenty auto-repeats, key up. One hand-back, not twenty-one.
    n = len(status)
    device.send(pedal_down(repeats=20))
    status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_ACTION
                    and m.control_source == 'policy', timeout_s=WAIT_S,
                    what='action mode after the pedal toggled back', since=n)
    wait_until(lambda: lines(pedal, 'handback: ok'), WAIT_S, 'the hand-back reported', procs)

    # Unplugged and plugged in again: the same command picks it up.
    device.unplug()
    wait_until(lambda: 'unplugged' in pedal.log_text(), WAIT_S, 'the unplug noticed', procs)
    device.plug(procs)
    wait_until(lambda: len(lines(pedal, f'pedal {device.path} connected')) == 2, WAIT_S,
               'the replug noticed', procs)
    n = len(status)
    device.send(pedal_down())
    status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_TELEOP, timeout_s=WAIT_S,
                    what='teleop after the replugged pedal', since=n)
    wait_until(lambda: len(lines(pedal, 'takeover: ok')) == 2, WAIT_S, 'second takeover', procs)
    assert len(lines(pedal, 'handback:')) == 1, pedal.log_text()
    assert len(lines(pedal, 'takeover:')) == 2, pedal.log_text()
    assert pedal.stop() == 0  # Ctrl-C ends it cleanly


def test_an_unknown_key_is_refused_before_anything_starts(tmp_path):
    proc = NodeProcess('pedal', [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'pedal',
                                 str(tmp_path / 'event-kbd'), '--toggle', 'pedal'],
                       tmp_path / 'pedal.log')
    wait_until(lambda: not proc.alive, WAIT_S, 'the command exiting')
    assert proc.returncode == 2
    assert "unknown key 'pedal'" in proc.log_text()
